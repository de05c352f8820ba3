"""What this node knows of the cluster's other nodes, with time passed in.

Two different facts per peer:
- alive (``up``): any frame from it within --timeout-nodes (its pings, copies,
  removes, or answers). Takeover decisions rest on this: a node that sends
  anything is not down.
- reachable: it answered a request on our own link to it within --timeout-nodes.
  Copies and removes go only to reachable peers, and a link that stays silent is
  connected afresh.

A peer that says it is leaving (LEAVING, as it stops by SIGTERM) is neither at once,
as if --timeout-nodes of silence had passed, and stays so until it says PING again (a
frame of the stopping process still on its way does not count it up). Takeover alone
keeps its own timer: the leaving node counts as alive for it until --timeout-nodes
after it was last heard, so a planned restart does not move its deliveries.
"""

from __future__ import annotations

from dataclasses import dataclass

UNREACHED_REPEAT_S = 60.0  # a peer never reached is said again this often, not per ACK


@dataclass
class Peer:
    endpoint: str
    node_id: bytes | None = None  # learned from its first frame
    last_heard: float | None = None  # monotonic seconds, any frame
    last_answer: float | None = None  # monotonic seconds, an answer on our link
    up: bool = False  # alive
    reachable: bool = False
    unreached_said: float | None = None  # monotonic seconds: last said never reached
    handshake_refused: str = ""  # why its last handshake on our link failed (handshakes)
    not_a_cluster_endpoint: str = ""  # why its answers are no cluster frames (wrong_endpoints)
    left: bool = False  # said LEAVING, and no PING since


class PeerTable:
    def __init__(self, endpoints: tuple[str, ...], timeout_nodes_s: float, now: float) -> None:
        self.timeout_nodes_s = timeout_nodes_s
        self.started = now
        self.peers = {endpoint: Peer(endpoint) for endpoint in endpoints}

    def heard(self, endpoint: str, node_id: bytes, now: float) -> bool:
        """Any frame from the peer; True when it has just come up."""
        peer = self.peers[endpoint]
        came_up = not peer.up
        peer.node_id, peer.last_heard, peer.up = node_id, now, True
        return came_up

    def answered(self, endpoint: str, node_id: bytes, now: float) -> bool:
        """An answer on our link to the peer; True when it has just come up."""
        peer = self.peers[endpoint]
        peer.last_answer, peer.reachable = now, True
        return self.heard(endpoint, node_id, now)

    def refresh(self, now: float) -> list[Peer]:
        """Mark silent peers down (and unanswering links unreachable); returns the
        peers that have just gone down."""
        gone = []
        for peer in self.peers.values():
            if peer.reachable and now - (peer.last_answer or 0) > self.timeout_nodes_s:
                peer.reachable = False
            if peer.up and now - (peer.last_heard or 0) > self.timeout_nodes_s:
                peer.up = False
                gone.append(peer)
        return gone

    def left(self, endpoint: str) -> bool:
        """The peer said it is leaving: down and unreachable at once; True when it was
        counted up until now."""
        peer = self.peers[endpoint]
        was_up = peer.up
        peer.up = peer.reachable = False
        peer.left = True
        return was_up

    def pinged(self, endpoint: str) -> None:
        """A PING: a peer that had left is back (its frames count again)."""
        self.peers[endpoint].left = False

    def never_reached(self, now: float) -> list[Peer]:
        """Peers not heard from once since start, when that is worth saying: first as the
        start's grace ends, then every UNREACHED_REPEAT_S while it stays so."""
        if self.in_grace(now):
            return []
        due = [peer for peer in self.peers.values() if peer.last_heard is None and (
            peer.unreached_said is None or now - peer.unreached_said >= UNREACHED_REPEAT_S)]
        for peer in due:
            peer.unreached_said = now
        return due

    def up_peers(self) -> list[Peer]:
        return [peer for peer in self.peers.values() if peer.up]

    def reachable_peers(self) -> list[Peer]:
        return [peer for peer in self.peers.values() if peer.reachable]

    def quorum(self, now: float | None = None) -> bool:
        """This node and the peers it hears make a majority of the cluster. A cluster
        of two cannot tell a crash from a cut, so there one node alone counts. With
        ``now`` (a takeover's question), a peer that left counts until its timer ends."""
        size = len(self.peers) + 1
        alive = (self.up_peers() if now is None else
                 [peer for peer in self.peers.values() if self._alive_for_takeover(peer, now)])
        return size <= 2 or (len(alive) + 1) * 2 > size

    def in_grace(self, now: float) -> bool:
        """Right after start nobody has been heard yet: nobody is known to be down."""
        return now - self.started < self.timeout_nodes_s

    def node_alive(self, node_id: bytes, now: float) -> bool:
        if self.in_grace(now):
            return True
        return any(self._alive_for_takeover(peer, now) and peer.node_id == node_id
                   for peer in self.peers.values())

    def _alive_for_takeover(self, peer: Peer, now: float) -> bool:
        """Up, or left less than --timeout-nodes after it was last heard: a takeover
        waits for the same silence whether the peer said it was leaving or not."""
        return peer.up or (peer.left and now - (peer.last_heard or 0) <= self.timeout_nodes_s)

    def endpoint_of(self, node_id: bytes) -> str | None:
        for peer in self.peers.values():
            if peer.node_id == node_id:
                return peer.endpoint
        return None
