"""Liveness of the cluster's other nodes, from heartbeats, with time passed in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Peer:
    endpoint: str
    node_id: bytes | None = None  # learned from its first heartbeat
    last_heard: float | None = None  # monotonic seconds
    up: bool = False


class PeerTable:
    def __init__(self, endpoints: tuple[str, ...], timeout_s: float, now: float) -> None:
        self.timeout_s = timeout_s
        self.started = now
        self.peers = {endpoint: Peer(endpoint) for endpoint in endpoints}

    def heard(self, endpoint: str, node_id: bytes, now: float) -> bool:
        """Record a sign of life; True when the peer has just come up."""
        peer = self.peers[endpoint]
        came_up = not peer.up
        peer.node_id, peer.last_heard, peer.up = node_id, now, True
        return came_up

    def refresh(self, now: float) -> list[Peer]:
        """Mark silent peers down; returns those that have just gone down."""
        gone = []
        for peer in self.peers.values():
            if peer.up and now - (peer.last_heard or 0) > self.timeout_s:
                peer.up = False
                gone.append(peer)
        return gone

    def up_peers(self) -> list[Peer]:
        return [peer for peer in self.peers.values() if peer.up]

    def in_grace(self, now: float) -> bool:
        """Right after start nobody has been heard yet: nobody is known to be down."""
        return now - self.started < self.timeout_s

    def node_alive(self, node_id: bytes, now: float) -> bool:
        if self.in_grace(now):
            return True
        return any(peer.up and peer.node_id == node_id for peer in self.peers.values())

    def endpoint_of(self, node_id: bytes) -> str | None:
        for peer in self.peers.values():
            if peer.node_id == node_id:
                return peer.endpoint
        return None
