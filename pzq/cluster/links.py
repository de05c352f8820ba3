"""The cluster's sockets: a ROUTER at --broadcast-dsn, and one DEALER to each peer
(each with a monitor, read at the heartbeat: pzq.cluster.handshakes).

Requests go out on the DEALER connected to a peer and its ROUTER answers on the
same pipe. This module only moves frames between the sockets and ``ClusterCore``;
it owns no rule but one of ZeroMQ's: an ipc endpoint that did not exist yet when
we connected is never retried, so a link that has not answered for a while gets
a fresh connect.
"""

from __future__ import annotations

import errno
from typing import Protocol

import zmq

from pzq.cluster import hosts
from pzq.cluster.handshakes import PeerHandshakes
from pzq.cluster.peers import PeerTable
from pzq.cluster.replication import PendingAck
from pzq.cluster.routes import Routes
from pzq.cluster.sends import Reply, Send, ToPeer
from pzq.cluster.settings import ClusterSettings
from pzq.delivery.state import DeliveryState
from pzq.security import NodeCurve, NodeSecurity
from pzq.sockets import bind, dual_stack
from pzq.store.batch import Batch
from pzq.zmqio import Context, Events, Socket, drain

PEER_SNDHWM = 10_000
LEAVE_LINGER_MS = 500  # how long the close waits for LEAVING to go (a peer away: no more)
RECEIVE_BATCH = 1024


class LinkedCore(Protocol):
    """What the sockets and the loop ask of the cluster's rules (pzq.cluster.core)."""

    @property
    def settings(self) -> ClusterSettings: ...

    @property
    def peers(self) -> PeerTable: ...

    @property
    def routes(self) -> Routes: ...

    def heartbeat(self, now: float, own: DeliveryState) -> None: ...

    def receive_request(self, routing_id: bytes, frames: list[bytes], batch: Batch,
                        own: DeliveryState, now: float) -> None: ...

    def receive_reply(self, endpoint: str, frames: list[bytes], batch: Batch,
                      own: DeliveryState, now: float) -> list[PendingAck]: ...

    def take_outgoing(self) -> list[Send]: ...

    def next_deadline(self) -> float | None: ...

    def expire(self, now: float) -> list[PendingAck]: ...

    def owe_removes(self, batch: Batch, now: float) -> None: ...

    def flush_removes(self, now: float) -> None: ...

    def leave(self) -> None: ...


class ClusterLinks:
    def __init__(self, core: LinkedCore, context: Context,
                 security: NodeSecurity, now: float) -> None:
        """Bind the ROUTER and connect to every peer, with the node's CURVE keys when
        it has them (the ROUTER in the cluster's ZAP domain when nodes have their own)."""
        self.core = core
        self.security = security
        settings = core.settings
        self.router = bind(context, zmq.ROUTER, settings.broadcast_dsn, "--broadcast-dsn",
                           security, cluster=True,
                           options={zmq.MAXMSGSIZE: settings.max_frame_size})
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        hosts.warn_unresolved(settings.nodes)  # once, before the loop: it waits for DNS
        self.dealers: dict[str, Socket] = {}
        self._connected_at: dict[str, float] = {}
        self.handshakes = PeerHandshakes(
            core.peers, curve=any(security.to_peer(endpoint).on for endpoint in settings.nodes),
            own_keys=isinstance(security, NodeCurve) and security.cluster_keys is not None)
        for endpoint in settings.nodes:
            dealer = context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.IMMEDIATE, 1)  # nothing queues for a peer that is away
            dealer.setsockopt(zmq.SNDHWM, PEER_SNDHWM)
            dual_stack(dealer, endpoint)
            security.to_peer(endpoint).apply(dealer)
            self.handshakes.watch(endpoint, dealer)
            dealer.connect(endpoint)
            self.dealers[endpoint] = dealer
            self._connected_at[endpoint] = now

    def sockets(self) -> list[Socket]:
        return [self.router, *self.dealers.values()]

    def close(self) -> None:
        self.handshakes.close()
        for socket in self.sockets():
            socket.close(0)

    def leave(self) -> None:
        """The node stops (SIGTERM): LEAVING to the peers, given a short linger at the
        close to go (the links close with none otherwise)."""
        for dealer in self.dealers.values():
            dealer.setsockopt(zmq.LINGER, LEAVE_LINGER_MS)
        self.core.leave()
        self.send()

    def heartbeat(self, now: float, own: DeliveryState) -> None:
        self.handshakes.read()  # first: the warnings of this tick name a refusal
        self.core.heartbeat(now, own)
        for endpoint, dealer in self.dealers.items():
            self._reconnect_if_silent(endpoint, dealer, now)
        self.send()

    def _reconnect_if_silent(self, endpoint: str, dealer: Socket,
                             now: float) -> None:
        peer = self.core.peers.peers[endpoint]
        if peer.reachable or now - self._connected_at[endpoint] < self.core.peers.timeout_nodes_s:
            return
        dealer.disconnect(endpoint)
        # the peer's key as the cluster directory says now: a SIGHUP may have read a
        # new one (a node that rotated its key pair), taken at this connect
        self.security.to_peer(endpoint).apply(dealer)
        dealer.connect(endpoint)
        self._connected_at[endpoint] = now

    def receive(self, events: Events, batch: Batch,
                own: DeliveryState, now: float) -> list[PendingAck]:
        """Hand every waiting frame to the core; returns producer ACKs now complete."""
        if events.get(self.router, 0) & zmq.POLLIN:
            for routing_id, *frames in drain(self.router, RECEIVE_BATCH):
                self.core.receive_request(routing_id, frames, batch, own, now)
        complete: list[PendingAck] = []
        for endpoint, dealer in self.dealers.items():
            if events.get(dealer, 0) & zmq.POLLIN:
                for frames in drain(dealer, RECEIVE_BATCH):
                    complete.extend(self.core.receive_reply(endpoint, frames, batch, own, now))
        return complete

    def send(self) -> None:
        """Send what the core has for the peers; a full or gone pipe drops the frames
        (peers repeat pings, and a missing confirmation ends in REPLICATION_FAILED)."""
        for item in self.core.take_outgoing():
            if isinstance(item, ToPeer):
                _send(self.dealers[item.endpoint], item.frames)
            elif isinstance(item, Reply):
                _send(self.router, [item.routing_id, *item.frames])


def _send(socket: Socket, frames: list[bytes]) -> None:
    try:
        socket.send_multipart(frames, zmq.NOBLOCK)
    except zmq.Again:
        pass
    except zmq.ZMQError as exc:
        if exc.errno != errno.EHOSTUNREACH:
            raise
