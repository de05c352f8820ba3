"""The cluster side of a node: heartbeats, replication, broadcast remove, takeover.

Owned by the loop thread like every other socket. The device calls in at fixed
points of a wake (see pzq.node.device): ``handle`` for cluster traffic, ``replicate``
after its batch is written, ``written``/``write_failed`` after each batch,
``heartbeat`` on the scheduler's tick, and ``flush`` before it delivers.

Takeover rule, applied by every node alone: while a message's origin is down, the
first live node in the message's holder list delivers it. An ACK on a taken-over
message removes it on every node and leaves a tombstone; when the origin comes
back it collects the tombstones (in PONG) before it delivers anything.
"""

from __future__ import annotations

import errno
import time
from collections import defaultdict
from typing import Callable

import zmq

from pzq.cluster.peers import PeerTable
from pzq.cluster.replication import PendingAck, ReplicationTracker
from pzq.config import Config
from pzq.delivery.areas import TakeoverArea
from pzq.delivery.state import DeliveryState
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.node.counters import Counters
from pzq.protocol import cluster as cw
from pzq.security import ClientCurve
from pzq.store.replicas import ReplicaStore, encode_holders, split_value
from pzq.store.store import Batch, Store

log = get_logger("pzq.cluster.node")

PEER_SNDHWM = 10_000
TOMBSTONES_PER_PONG = 10_000
RECEIVE_BATCH = 1024

AckSink = Callable[[bytes, bytes, bool, bytes], None]  # routing id, msg id, ok, status


class Cluster:
    def __init__(self, config: Config, store: Store, counters: Counters,
                 send_ack: AckSink) -> None:
        assert config.broadcast_dsn is not None
        self.config = config
        self.store = store
        self.node_id = store.node_id
        self.counters = counters
        self.send_ack = send_ack
        self.replicas = ReplicaStore(store)
        now = time.monotonic()
        self.peers = PeerTable(config.nodes, config.timeout_nodes / 1e6, now)
        self.tracker = ReplicationTracker(config.replicas, config.timeout_replication / 1e6)
        self.takeovers: dict[bytes, DeliveryState] = {}
        self._synced: set[str] = set()  # peers whose tombstones for us are all applied
        self._rotation = 0
        self._removes_out: defaultdict[bytes, list[int]] = defaultdict(list)
        self._removes_owed: defaultdict[str, list[tuple[bytes, list[int]]]] = defaultdict(list)
        self._after_write: list[tuple[zmq.Socket, list[bytes]]] = []
        self.router: zmq.Socket | None = None
        self.dealers: dict[str, zmq.Socket] = {}
        self._connected_at: dict[str, float] = {}
        self.rejected = 0  # cluster frames from strangers or malformed
        self._senders: dict[bytes, tuple[str, bytes]] = {}  # routing id -> endpoint, node

    # -- sockets -------------------------------------------------------------

    def open(self, context: zmq.Context, bind: Callable[..., zmq.Socket],
             curve: ClientCurve | None) -> None:
        self.router = bind(context, zmq.ROUTER, self.config.broadcast_dsn, "--broadcast-dsn")
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        for endpoint in self.config.nodes:
            dealer = context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.IMMEDIATE, 1)  # nothing queues for a peer that is away
            dealer.setsockopt(zmq.SNDHWM, PEER_SNDHWM)
            dealer.setsockopt(zmq.IPV6, endpoint.startswith("tcp://["))
            if curve is not None:
                curve.apply(dealer)
            dealer.connect(endpoint)
            self.dealers[endpoint] = dealer
            self._connected_at[endpoint] = time.monotonic()

    def sockets(self) -> list[zmq.Socket]:
        return [self.router, *self.dealers.values()]

    def close(self) -> None:
        for socket in self.sockets():
            if socket is not None:
                socket.close(0)

    def _send(self, socket: zmq.Socket, frames: list[bytes]) -> bool:
        try:
            socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno != errno.EHOSTUNREACH:
                raise
            return False
        return True

    # -- heartbeats and liveness -------------------------------------------------

    def heartbeat(self, now: float) -> None:
        for endpoint, dealer in self.dealers.items():
            self._send(dealer, cw.encode_ping(self.node_id, self.config.broadcast_dsn))
            self._reconnect_if_silent(endpoint, dealer, now)
        for peer in self.peers.refresh(now):
            self._synced.discard(peer.endpoint)
            log.warning("peer_down", endpoint=peer.endpoint,
                        node_id=(peer.node_id or b"?").decode())
        self._update_takeovers(now)

    def _reconnect_if_silent(self, endpoint: str, dealer: zmq.Socket, now: float) -> None:
        """A peer is up only while it answers our pings. When it has not for a while,
        connect afresh: an ipc endpoint that did not exist yet is not retried."""
        peer = self.peers.peers[endpoint]
        if peer.up or now - self._connected_at.get(endpoint, 0.0) < self.peers.timeout_s:
            return
        dealer.disconnect(endpoint)
        dealer.connect(endpoint)
        self._connected_at[endpoint] = now

    def _heard(self, endpoint: str, node_id: bytes, now: float) -> None:
        if self.peers.heard(endpoint, node_id, now):
            log.info("peer_up", endpoint=endpoint, node_id=node_id.decode())
            for origin, seqs in self._removes_owed.pop(endpoint, []):
                self._send(self.dealers[endpoint], cw.encode_remove(origin, seqs))
            self._update_takeovers(now)

    def own_delivery_allowed(self, now: float) -> bool:
        """After a start, wait for the peers' tombstones (or for them to be down)."""
        if not self.peers.in_grace(now):
            return True
        return all(endpoint in self._synced for endpoint in self.config.nodes)

    # -- takeover ------------------------------------------------------------------

    def _is_first_live_holder(self, holders: tuple[bytes, ...]) -> bool:
        now = time.monotonic()
        for holder in holders:
            if holder == self.node_id:
                return True
            if self.peers.node_alive(holder, now):
                return False
        return False

    def _update_takeovers(self, now: float) -> None:
        for origin in set(self.replicas.origins()) | set(self.takeovers):
            state = self.takeovers.get(origin)
            if self.peers.node_alive(origin, now):
                if state is not None and not state.paused:
                    state.paused = True
                    log.info("takeover_stopped", origin=origin.decode())
                continue
            if state is None:
                state = DeliveryState(TakeoverArea(self.replicas, origin,
                                                   self._is_first_live_holder),
                                      self.config.ack_timeout, self.config.inflight_size,
                                      self.counters, self.config.max_deliveries,
                                      self.config.delivery_headers)
                self.takeovers[origin] = state
                log.warning("takeover_started", origin=origin.decode(),
                            replicas=self.replicas.counts[origin])
            elif state.paused:
                state.paused = False
                log.warning("takeover_resumed", origin=origin.decode())
            state.rewind()  # who is first in line may have changed
        for origin in [o for o, s in self.takeovers.items() if s.paused and not s.inflight]:
            del self.takeovers[origin]

    def takeover_ack(self, batch: Batch, origin: bytes, seq: int, ok: bool) -> bool:
        """Apply a consumer's answer for a taken-over message; False if it names none
        (counted once, here or by the delivery state)."""
        state = self.takeovers.get(origin)
        if state is None:
            self.counters.unknown_acks += 1
            return False
        if not ok:
            return state.nack(seq)
        if state.ack(batch, seq) is None:
            return False
        self._removes_out[origin].append(seq)
        return True

    def dead_lettered(self, origin: bytes, seqs: list[int]) -> None:
        """Taken-over messages given up here: every other holder drops its copy."""
        self._removes_out[origin].extend(seqs)

    # -- replication (origin side) -------------------------------------------------

    def replicate(self, stored: list[tuple[bytes, bytes, int, bytes]], now: float) -> None:
        """Send a written batch to ``replicas`` live peers and hold its producer ACKs."""
        live = self.peers.up_peers()
        if live:
            self._rotation = (self._rotation + 1) % len(live)
            live = live[self._rotation:] + live[:self._rotation]
        chosen = live[:self.config.replicas]
        holders = encode_holders(tuple(peer.node_id for peer in chosen))
        batch_ids = self.tracker.track([(rid, mid) for rid, mid, _, _ in stored],
                                       [peer.endpoint for peer in chosen], now)
        messages = [(seq, value) for _, _, seq, value in stored]
        for endpoint, batch_id in batch_ids.items():
            sent = self._send(self.dealers[endpoint],
                              cw.encode_replicate(self.node_id, batch_id, holders, messages))
            log.debug("replicate_sent", peer=endpoint, batch_id=batch_id,
                      messages=len(messages), sent=sent)

    def expire_replication(self, now: float) -> None:
        for ack in self.tracker.expire(now):
            self._ack_producer(ack, replicated=False)

    def next_deadline(self) -> float | None:
        return self.tracker.next_deadline()

    def fail_replication(self) -> None:
        """At stop: every producer ACK still waiting for copies goes out now."""
        for ack in self.tracker.fail_all():
            self._ack_producer(ack, replicated=False)

    def _ack_producer(self, ack: PendingAck, replicated: bool) -> None:
        self.send_ack(ack.routing_id, ack.msg_id, True,
                      b"" if replicated else b"REPLICATION_FAILED")

    # -- removes ---------------------------------------------------------------------

    def removed_own(self, seqs: list[int]) -> None:
        """Own messages acked here: every holder must drop its copy."""
        if self.config.replicas and seqs:
            self._removes_out[self.node_id].extend(seqs)

    def flush(self) -> None:
        """Broadcast this wake's removes (after its batch is written)."""
        for origin, seqs in self._removes_out.items():
            frames = cw.encode_remove(origin, seqs)
            origin_endpoint = self.peers.endpoint_of(origin)
            for endpoint, dealer in self.dealers.items():
                sent = self.peers.peers[endpoint].up and self._send(dealer, frames)
                # A holder that missed it gets it when back; a down origin instead
                # collects tombstones when it returns.
                if not sent and endpoint != origin_endpoint:
                    self._removes_owed[endpoint].append((origin, seqs))
        self._removes_out.clear()

    # -- incoming traffic ------------------------------------------------------------

    def handle(self, events: dict, batch: Batch, own: DeliveryState, now: float) -> None:
        if events.get(self.router, 0) & zmq.POLLIN:
            self._handle_requests(batch, own, now)
        for endpoint, dealer in self.dealers.items():
            if events.get(dealer, 0) & zmq.POLLIN:
                self._handle_replies(endpoint, dealer, batch, own, now)

    def _handle_requests(self, batch: Batch, own: DeliveryState, now: float) -> None:
        for _ in range(RECEIVE_BATCH):
            try:
                routing_id, *frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._request(routing_id, frames, batch, own, now)
            except DecodeError as exc:
                self.rejected += 1
                log.debug("cluster_frame_rejected", reason=str(exc))

    def _request(self, routing_id: bytes, frames: list[bytes], batch: Batch,
                 own: DeliveryState, now: float) -> None:
        command = frames[0] if frames else b""
        if command == cw.PING:
            node_id, endpoint = cw.decode_ping(frames)
            if endpoint not in self.peers.peers:
                raise DecodeError(f"PING from {endpoint!r}, which is not in --nodes")
            self._senders[routing_id] = (endpoint, node_id)
            self._answer_ping(routing_id, node_id)
            return
        sender = self._senders.get(routing_id)
        if sender is None:
            raise DecodeError("cluster frame from a sender that never said PING")
        endpoint, sender_node = sender
        if command == cw.REPLICATE:
            self._store_replicas(routing_id, sender_node, cw.decode_replicate(frames), batch)
        elif command == cw.REMOVE:
            origin, seqs = cw.decode_remove(frames)
            self._apply_removes(origin, seqs, batch, own, now)
        elif command == cw.APPLIED:
            self.replicas.drop_tombstones(batch, sender_node, cw.decode_applied(frames))
        else:
            raise DecodeError(f"unknown cluster command {command[:20]!r}")

    def _answer_ping(self, routing_id: bytes, node_id: bytes) -> None:
        tombstones = []
        if self.replicas.tombstones[node_id] > 0:
            tombstones = self.replicas.tombstone_seqs(node_id, TOMBSTONES_PER_PONG + 1)
        more = len(tombstones) > TOMBSTONES_PER_PONG
        self._send(self.router, [routing_id, *cw.encode_pong(
            self.node_id, tombstones[:TOMBSTONES_PER_PONG], more)])

    def _store_replicas(self, routing_id: bytes, sender_node: bytes,
                        replicate: cw.Replicate, batch: Batch) -> None:
        if replicate.origin != sender_node:
            raise DecodeError("a node may only replicate its own messages")
        holders = _decode_holders(replicate.holders)
        log.debug("replicas_received", origin=sender_node.decode(),
                  batch_id=replicate.batch_id, messages=len(replicate.messages))
        for seq, value in replicate.messages:
            self.replicas.add(batch, replicate.origin, seq, holders, value)
        # Confirm only once the batch holding the copies is written.
        self._after_write.append((self.router, [routing_id,
                                                *cw.encode_replicated(replicate.batch_id)]))

    def _apply_removes(self, origin: bytes, seqs: list[int], batch: Batch,
                       own: DeliveryState, now: float) -> None:
        if origin == self.node_id:  # acked on a node that had taken over our messages
            for seq in seqs:
                own.ack(batch, seq)
            return
        origin_down = not self.peers.node_alive(origin, now)
        for seq in seqs:
            state = self.takeovers.get(origin)
            if state is not None:
                state.inflight.pop(seq)
                state.ready.remove(seq)
            self.replicas.remove(batch, origin, seq, tombstone=origin_down)

    def _handle_replies(self, endpoint: str, dealer: zmq.Socket, batch: Batch,
                        own: DeliveryState, now: float) -> None:
        for _ in range(RECEIVE_BATCH):
            try:
                frames = dealer.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._reply(endpoint, dealer, frames, batch, own, now)
            except DecodeError as exc:
                self.rejected += 1
                log.debug("cluster_frame_rejected", reason=str(exc), peer=endpoint)

    def _reply(self, endpoint: str, dealer: zmq.Socket, frames: list[bytes], batch: Batch,
               own: DeliveryState, now: float) -> None:
        command = frames[0] if frames else b""
        if command == cw.PONG:
            node_id, tombstones, more = cw.decode_pong(frames)
            self._heard(endpoint, node_id, now)
            if tombstones:
                for seq in tombstones:
                    own.ack(batch, seq)
                self._after_write.append((dealer, cw.encode_applied(tombstones)))
            if not more:
                self._synced.add(endpoint)
        elif command == cw.REPLICATED:
            self.peers.heard(endpoint, self.peers.peers[endpoint].node_id or b"", now)
            for ack in self.tracker.confirm(cw.decode_replicated(frames), endpoint):
                self._ack_producer(ack, replicated=True)
        else:
            raise DecodeError(f"unknown cluster reply {command[:20]!r}")

    # -- batches -------------------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        for state in self.takeovers.values():
            state.prepare(batch)

    def written(self) -> None:
        self.replicas.written()
        for socket, frames in self._after_write:
            self._send(socket, frames)
        self._after_write.clear()

    def write_failed(self) -> None:
        self.replicas.write_failed()
        self._after_write.clear()
        for state in self.takeovers.values():
            state.write_failed()

    # -- monitor ---------------------------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, object]:
        return {
            "peers": self._peer_figures(now),
            "replication_failures": self.tracker.failures,
            "cluster_rejected": self.rejected,
            "replicas_held": sum(self.replicas.counts.values()),
            "tombstones_held": sum(self.replicas.tombstones.values()),
            "takeovers": sorted(origin.decode() for origin, state in self.takeovers.items()
                                if not state.paused),
        }

    def _peer_figures(self, now: float) -> list[dict[str, object]]:
        return [{
            "endpoint": peer.endpoint,
            "node_id": (peer.node_id or b"").decode(),
            "state": "up" if peer.up else "down",
            "last_heard_seconds": (None if peer.last_heard is None
                                   else round(now - peer.last_heard, 3)),
            "replicas_held": self.replicas.counts[peer.node_id] if peer.node_id else 0,
            "replication_lag": self.tracker.lag.get(peer.endpoint, 0),
        } for peer in self.peers.peers.values()]


NO_CLUSTER: dict[str, object] = {"peers": [], "replication_failures": 0, "cluster_rejected": 0,
                                 "replicas_held": 0, "tombstones_held": 0, "takeovers": []}


def _decode_holders(blob: bytes) -> tuple[bytes, ...]:
    holders, rest = split_value(blob)
    if rest:
        raise DecodeError("holder list has trailing bytes")
    return holders
