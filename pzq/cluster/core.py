"""The cluster's rules without sockets: frames in, frames out, time passed in.

Every node pings its peers, copies each written batch of its own messages to
``replicas`` live peers before ACKing the producers (REPLICATED confirms a copy),
broadcasts REMOVE when a message is acked, holds other nodes' copies without
delivering them, and takes over the delivery of a down node's messages (see
``pzq.cluster.takeover``). An ACK of a taken-over message leaves a tombstone; a
returning origin collects the tombstones (in PONG) before it delivers anything.
Each node tells its peers who reads its topics (TOPICS, before the copies it
concerns and again with the heartbeats): the group ``default`` and the named
groups, so that a takeover serves each group the copies it holds. A group done with
a message other groups still hold is told to every peer (DONE, see
``pzq.cluster.done``) both ways: from the origin, so the holders do not serve it
again, and from a node that took over, so the returning origin does not.

``pzq.cluster.links`` moves the frames: what this class wants sent waits in
``outgoing``; confirmations of copies written here wait for the batch that holds
them (``written``). Producer ACKs come back as return values, never callbacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pzq.cluster.done import Dones
from pzq.cluster.peers import PeerTable
from pzq.cluster.placement import Placement
from pzq.cluster.protocols import PeerProtocols
from pzq.cluster.removes import RemoveLedger
from pzq.cluster.replication import PendingAck, ReplicationTracker
from pzq.cluster.routes import Routes
from pzq.cluster.senders import Senders
from pzq.cluster.settings import ClusterSettings
from pzq.cluster.takeover import StateFactory, Takeovers
from pzq.delivery.state import DeliveryState
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.protocol import cluster as cw
from pzq.store.batch import Batch, Participant
from pzq.store.record import Stored
from pzq.store.replicas import ReplicaStore, decode_holders, encode_holders
from pzq.store.store import Store
from pzq.store.topics import Topics

log = get_logger("pzq.cluster")

TOMBSTONES_PER_PONG = 10_000
HELD_PER_PONG = 10_000


@dataclass(frozen=True, slots=True)
class ToPeer:
    """Frames for a peer's ROUTER, over our DEALER connected to it."""

    endpoint: str
    frames: list[bytes]


@dataclass(frozen=True, slots=True)
class Reply:
    """Frames back to whoever sent a request to our ROUTER."""

    routing_id: bytes
    frames: list[bytes]


Send = ToPeer | Reply
# routing id, sender's node id, frames, the wake's batch, own delivery state, now
Handler = Callable[[bytes, bytes, list[bytes], Batch, DeliveryState, float], None]


class ClusterCore(Participant):
    def __init__(self, settings: ClusterSettings, store: Store, make_state: StateFactory,
                 now: float, topics: Topics, client_endpoints: dict[str, str],
                 own_reads: Callable[[], cw.DefaultReads] = cw.DefaultReads) -> None:
        """``own_reads``: what ``default`` and the named groups read of this node's
        topics now, told to the peers holding copies (TOPICS)."""
        self.settings = settings
        self.node_id = store.node_id
        self.replicas = ReplicaStore(store)
        self.peers = PeerTable(settings.nodes, settings.timeout_nodes_s, now)
        self.routes = Routes(Placement(settings.broadcast_dsn, self.peers), client_endpoints,
                             topics)
        self.tracker = ReplicationTracker(settings.replicas, settings.timeout_replication_s)
        self.takeovers = Takeovers(self.replicas, self.peers, self.node_id, make_state, now)
        resend_s = max(0.5, settings.timeout_nodes_s / 4)
        self.removes = RemoveLedger(store, settings.nodes, resend_s)
        self.done = Dones(self.removes, self.replicas, self.peers, self.takeovers, settings,
                          self.node_id)
        self.outgoing: list[Send] = []
        self.rejected = 0  # cluster frames from strangers, or malformed
        self._after_write: list[Send] = []
        self._synced: set[str] = set()  # peers whose tombstones for us are all applied
        self._rotation = 0
        # Own messages a peer still has out with its consumers (from its PONG).
        self._held: dict[str, set[int]] = {}
        self.senders = Senders()
        self.protocols = PeerProtocols()  # what each peer speaks (its ROUTING says)
        # A frame's command -> what a peer's frame does here (PING is answered first)
        self._handlers: dict[bytes, Handler] = {
            cw.REPLICATE: self._on_replicate, cw.REMOVE: self._on_remove,
            cw.DONE: self._on_done, cw.APPLIED: self._on_applied, cw.TOPICS: self._on_topics,
            cw.ROUTING: self._on_routing}
        self.own_reads = own_reads
        self._reads_sent: dict[str, cw.DefaultReads] = {}  # what each peer was last told
        # What else to look at again when a peer lets messages go.
        self.on_released: Callable[[], None] = lambda: None

    def take_outgoing(self) -> list[Send]:
        outgoing, self.outgoing = self.outgoing, []
        return outgoing

    # -- liveness ------------------------------------------------------------------

    def heartbeat(self, now: float, own: DeliveryState) -> None:
        for endpoint in self.settings.nodes:
            self.outgoing.append(ToPeer(endpoint, cw.encode_ping(self.node_id,
                                                                 self.settings.broadcast_dsn)))
        for peer in self.peers.refresh(now):
            self._synced.discard(peer.endpoint)
            self._reads_sent.pop(peer.endpoint, None)
            if self._held.pop(peer.endpoint, None):  # a down peer's consumers cannot ack it
                self._released(own)
            log.warning("peer_down", endpoint=peer.endpoint,
                        node_id=(peer.node_id or b"?").decode())
        for peer in self.peers.never_reached(now):
            # Else the only sign is REPLICATION_FAILED in every ACK (a wrong --nodes entry?)
            log.warning("peer_never_reached", endpoint=peer.endpoint,
                        seconds_since_start=round(now - self.peers.started))
        self.takeovers.update(now)
        self.flush_removes(now)
        routing = cw.encode_routing(self.node_id, self.routes.own_routing())
        for peer in self.peers.reachable_peers():
            self.outgoing.append(ToPeer(peer.endpoint, routing))
        reads = self.own_reads()
        for peer in self.peers.reachable_peers():
            # Again while it says something: a TOPICS frame lost on a full pipe is
            # not answered, so it is repeated rather than confirmed.
            self._tell_reads(peer.endpoint, reads, again=bool(reads.default_from
                                                              or reads.groups))

    def tell_reads(self) -> None:
        """Who reads our topics changed (an operator's command): tell the peers now,
        not only with the next heartbeat."""
        reads = self.own_reads()
        for peer in self.peers.reachable_peers():
            self._tell_reads(peer.endpoint, reads)

    def _tell_reads(self, endpoint: str, reads: cw.DefaultReads, again: bool = False) -> None:
        """Tell a peer what ``default`` reads of our topics, if it does not know yet."""
        if again or self._reads_sent.get(endpoint) != reads:
            self._reads_sent[endpoint] = reads
            self.outgoing.append(ToPeer(endpoint, cw.encode_topics(self.node_id, reads)))

    def _heard(self, endpoint: str, node_id: bytes, now: float,
               answer: bool = False) -> None:
        """Any frame from a peer proves it is alive (an answer on our link also that
        we reach it); a peer that is back gets what it missed."""
        reachable = self.peers.peers[endpoint].reachable
        came_up = (self.peers.answered if answer else self.peers.heard)(endpoint, node_id, now)
        if came_up:
            log.info("peer_up", endpoint=endpoint, node_id=node_id.decode())
            self.takeovers.update(now)
        if answer and not reachable:
            self.removes.forget_sends(endpoint)
            self._reads_sent.pop(endpoint, None)
            self._tell_reads(endpoint, self.own_reads())
            self._send_removes(endpoint, now)

    def own_delivery_allowed(self, now: float) -> bool:
        """After a start, wait for the peers' tombstones (or for them to be down)."""
        if not self.peers.in_grace(now):
            return True
        return all(endpoint in self._synced for endpoint in self.settings.nodes)

    # -- replication (origin side) ---------------------------------------------------

    def replicate(self, stored: list[Stored], now: float) -> None:
        """Send a written batch to ``replicas`` live peers; its producer ACKs wait for
        their confirmations (``receive_reply``) or the deadline (``expire``)."""
        self._copy([(rid, mid) for rid, mid, _, _ in stored],
                   [(seq, value) for _, _, seq, value in stored], now)

    def replicate_quietly(self, messages: list[tuple[int, bytes]], now: float) -> None:
        """Copies of messages no producer waits for (a requeued dead letter)."""
        self._copy([], messages, now)

    def _copy(self, producers: list[tuple[bytes, bytes]], messages: list[tuple[int, bytes]],
              now: float) -> None:
        live = self.peers.reachable_peers()
        if live:
            self._rotation = (self._rotation + 1) % len(live)
            live = live[self._rotation:] + live[:self._rotation]
        chosen = live[:self.settings.replicas]
        holders = encode_holders(tuple(peer.node_id or b"" for peer in chosen))
        batch_ids = self.tracker.track(producers, [peer.endpoint for peer in chosen], now)
        reads = self.own_reads()
        for endpoint, batch_id in batch_ids.items():
            self._tell_reads(endpoint, reads)  # before the copies it concerns
            self.outgoing.append(ToPeer(endpoint, cw.encode_replicate(
                self.node_id, batch_id, holders, messages)))

    def expire(self, now: float) -> list[PendingAck]:
        """Producer ACKs whose copies did not come in time (REPLICATION_FAILED)."""
        return self.tracker.expire(now)

    def fail_all(self) -> list[PendingAck]:
        """At stop: every producer ACK still waiting for copies goes out now."""
        return self.tracker.fail_all()

    def next_deadline(self) -> float | None:
        return self.tracker.next_deadline()

    # -- removes -----------------------------------------------------------------------

    def removed_own(self, seqs: list[int]) -> None:
        """Own messages acked here: every holder must drop its copy."""
        self.done.removed_own(seqs)

    def done_own(self, group: str, seqs: list[int]) -> None:
        """Own messages ``group`` is done with while other groups hold them."""
        self.done.done_own(group, seqs)

    def removed_taken_over(self, origin: bytes, seqs: list[int],
                           group: str = cw.DEFAULT_GROUP) -> None:
        """Taken-over messages ``group`` acked or gave up here (see Dones)."""
        self.done.taken_over(origin, seqs, group)

    def removed(self, origin: bytes, seq: int, group: str = cw.DEFAULT_GROUP,
                final: bool = True) -> None:
        """A message ``group`` acked (or gave up) here; ``final``: no group holds it
        any more. Every holder drops its copy once every group is done, and marks it
        for the group before that."""
        if origin != self.node_id:
            self.removed_taken_over(origin, [seq], group)
        elif final:
            self.removed_own([seq])
        else:
            self.done_own(group, [seq])

    def tell_holders(self, batch: Batch, removed: list[int], group: str, done: list[int],
                     now: float) -> None:
        """An operator deleted own messages (``removed``) or made ``group`` done with
        them (``done``): every holder drops or marks its copies, owed in the operator's
        batch and sent with the next wake."""
        self.tell_reads()  # groups gone: before the removes and dones
        self.removed_own(removed)
        self.done_own(group, done)
        self.owe_removes(batch, now)
        self.flush_removes(now)

    def follow_groups(self, done_elsewhere: Callable[[Batch, str, list[int]], None],
                      rewind: Callable[[], None]) -> None:
        """The named groups' side of own messages: what a group finished on a node that
        took them over, and a look again when a peer lets messages go."""
        self.done.own_group_done = done_elsewhere
        self.on_released = rewind

    def owe_removes(self, batch: Batch, now: float) -> None:
        """Persist this wake's removes and dones in its batch (see Dones)."""
        self.done.owe(batch, now)

    def flush_removes(self, now: float) -> None:
        """Send every remove a reachable peer has not confirmed (again after a while)."""
        for peer in self.peers.reachable_peers():
            self._send_removes(peer.endpoint, now)

    def _send_removes(self, endpoint: str, now: float) -> None:
        due = self.removes.due(endpoint, now)
        if due:  # a group's DONE after TOPICS has named it (one declared just now)
            self._tell_reads(endpoint, self.own_reads())
        for frames in due:
            self.outgoing.append(ToPeer(endpoint, frames))

    def held_elsewhere(self, seq: int) -> bool:
        """An own message a peer still has out (taken over while we were away)."""
        return any(seq in held for held in self._held.values())

    def lowest_held(self) -> int | None:
        """The lowest own message a peer still has out (None: none), below which a
        group's floor must stay: the group has skipped it, not finished it."""
        return min((min(held) for held in self._held.values() if held), default=None)

    # -- incoming traffic ----------------------------------------------------------------

    def receive_request(self, routing_id: bytes, frames: list[bytes], batch: Batch,
                        own: DeliveryState, now: float) -> None:
        """A frame on our ROUTER; DecodeError (counted in ``rejected``) if refused."""
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
            self.senders.pinged(routing_id, endpoint, node_id)
            self._heard(endpoint, node_id, now)
            self.outgoing.append(Reply(routing_id, self._pong(node_id, endpoint)))
            return
        sender = self.senders.get(routing_id)
        if sender is None:
            raise DecodeError("cluster frame from a sender that never said PING")
        sender_endpoint, sender_node = sender
        self._heard(sender_endpoint, sender_node, now)
        handle = self._handlers.get(command)
        if handle is None:
            raise DecodeError(f"unknown cluster command {command[:20]!r}")
        handle(routing_id, sender_node, frames, batch, own, now)

    # -- one handler per frame a peer sends, after its PING -----------------------------

    def _on_replicate(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                      batch: Batch, own: DeliveryState, now: float) -> None:
        self._store_copies(routing_id, sender, cw.decode_replicate(frames), batch)

    def _on_remove(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                   batch: Batch, own: DeliveryState, now: float) -> None:
        origin, remove_id, seqs = cw.decode_remove(frames)
        self.done.apply_remove(origin, seqs, batch, own, now)
        self._after_write.append(Reply(routing_id, cw.encode_removed(remove_id)))

    def _on_done(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                 batch: Batch, own: DeliveryState, now: float) -> None:
        origin, done_id, group, seqs = cw.decode_done(frames)
        self.done.apply_done(origin, group, seqs, batch, own)
        self._after_write.append(Reply(routing_id, cw.encode_noted(done_id)))

    def _on_applied(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                    batch: Batch, own: DeliveryState, now: float) -> None:
        self.replicas.drop_tombstones(batch, sender, cw.decode_applied(frames))

    def _on_topics(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                   batch: Batch, own: DeliveryState, now: float) -> None:
        origin, reads = cw.decode_topics(frames)
        if origin != sender:
            raise DecodeError("a node may only describe its own topics")
        self.replicas.describe_topics(batch, origin, reads)

    def _on_routing(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                    batch: Batch, own: DeliveryState, now: float) -> None:
        origin, routing = cw.decode_routing_frame(frames)
        if origin != sender:
            raise DecodeError("a node may only describe its own routes")
        endpoint, _ = self.senders.get(routing_id) or ("", b"")
        self.protocols.heard(endpoint, routing.protocol)
        self.routes.learned(endpoint, routing)

    def _pong(self, node_id: bytes, endpoint: str) -> list[bytes]:
        """Tombstones of the asker's messages, and those it must not deliver yet: out
        with our consumers, or acked here and the remove not confirmed by it."""
        tombstones: list[int] = []
        if self.replicas.tombstones[node_id] > 0:
            tombstones = self.replicas.tombstone_seqs(node_id, TOMBSTONES_PER_PONG + 1)
        more = len(tombstones) > TOMBSTONES_PER_PONG
        held = self.takeovers.out_with_consumers(node_id) | self.removes.unconfirmed(
            node_id, endpoint)
        return cw.encode_pong(self.node_id, tombstones[:TOMBSTONES_PER_PONG], more,
                              sorted(held)[:HELD_PER_PONG])

    def _store_copies(self, routing_id: bytes, sender_node: bytes,
                      replicate: cw.Replicate, batch: Batch) -> None:
        if replicate.origin != sender_node:
            raise DecodeError("a node may only replicate its own messages")
        holders = decode_holders(replicate.holders)
        log.debug("replicas_received", origin=sender_node.decode(),
                  batch_id=replicate.batch_id, messages=len(replicate.messages))
        for seq, value in replicate.messages:
            self.replicas.add(batch, replicate.origin, seq, holders, value)
        # Confirm only once the batch holding the copies is written.
        self._after_write.append(Reply(routing_id, cw.encode_replicated(replicate.batch_id)))

    def receive_reply(self, endpoint: str, frames: list[bytes], batch: Batch,
                      own: DeliveryState, now: float) -> list[PendingAck]:
        """A reply on our DEALER to ``endpoint``; returns producer ACKs now complete."""
        try:
            return self._reply(endpoint, frames, batch, own, now)
        except DecodeError as exc:
            self.rejected += 1
            log.debug("cluster_frame_rejected", reason=str(exc), peer=endpoint)
            return []

    def _reply(self, endpoint: str, frames: list[bytes], batch: Batch, own: DeliveryState,
               now: float) -> list[PendingAck]:
        command = frames[0] if frames else b""
        if command == cw.PONG:
            pong = cw.decode_pong(frames)
            self._heard(endpoint, pong.node_id, now, answer=True)
            if pong.tombstones:
                for seq in pong.tombstones:
                    own.ack(batch, seq)
                self._after_write.append(ToPeer(endpoint, cw.encode_applied(pong.tombstones)))
            self._update_held(endpoint, set(pong.held), own)
            if not pong.more:
                self._synced.add(endpoint)
            return []
        node_id = self.peers.peers[endpoint].node_id
        if node_id is not None:
            self._heard(endpoint, node_id, now, answer=True)
        if command == cw.REPLICATED:
            return self.tracker.confirm(cw.decode_replicated(frames), endpoint)
        if command == cw.REMOVED:
            self.removes.confirmed(endpoint, cw.decode_removed(frames))
            return []
        if command == cw.NOTED:
            self.removes.confirmed(endpoint, cw.decode_noted(frames))
            return []
        raise DecodeError(f"unknown cluster reply {command[:20]!r}")

    def _update_held(self, endpoint: str, held: set[int], own: DeliveryState) -> None:
        released = self._held.get(endpoint, set()) - held
        self._held[endpoint] = held
        if released:
            self._released(own)

    def _released(self, own: DeliveryState) -> None:
        """A peer let own messages go (gave them up, confirmed them, or went down with
        them out): they were skipped while held, so every reader looks again."""
        own.rewind()
        self.on_released()

    # -- batch participant -------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        self.takeovers.prepare(batch)
        self.removes.prepare(batch)

    def written(self) -> None:
        self.replicas.written()
        self.takeovers.written()
        self.outgoing.extend(self._after_write)
        self._after_write.clear()

    def failed(self) -> None:
        self.replicas.failed()
        self.takeovers.failed()
        self._after_write.clear()

    # -- monitor -----------------------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, object]:
        return {
            "peers": self._peer_figures(now),
            "replication_failures": self.tracker.failures,
            "cluster_rejected": self.rejected,
            "replicas_held": sum(self.replicas.counts.values()),
            "tombstones_held": sum(self.replicas.tombstones.values()),
            "takeovers": [origin.decode() for origin in self.takeovers.active_origins()],
        }

    def _peer_figures(self, now: float) -> list[dict[str, object]]:
        return [{
            "endpoint": peer.endpoint,
            "node_id": (peer.node_id or b"").decode(),
            # up: it talks to us and answers us; unreachable: it talks to us, but our
            # link to it gets no answer (so no copies go to it); down: silent.
            "state": ("up" if peer.reachable else "unreachable") if peer.up else "down",
            "reachable": peer.reachable,
            "last_heard_seconds": (None if peer.last_heard is None
                                   else round(now - peer.last_heard, 3)),
            "replicas_held": self.replicas.counts[peer.node_id] if peer.node_id else 0,
            "replication_lag": self.tracker.lag.get(peer.endpoint, 0),
            "removes_owed": self.removes.owed_to(peer.endpoint),
            "held_there": len(self._held.get(peer.endpoint, ())),
            "protocol": self.protocols.spoken.get(peer.endpoint),  # None: not heard yet
        } for peer in self.peers.peers.values()]


NO_CLUSTER: dict[str, object] = {"peers": [], "replication_failures": 0, "cluster_rejected": 0,
                                 "replicas_held": 0, "tombstones_held": 0, "takeovers": []}
