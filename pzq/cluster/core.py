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
them (``written``). Producer ACKs come back as return values, never callbacks; what
other parts act on (a peer let own messages go, a group done elsewhere) is published
on the node's hub (pzq.events).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pzq.backup.manifest import lost_seqs
from pzq.clock import Now
from pzq.cluster.done import Dones
from pzq.cluster.figures import peer_figures
from pzq.cluster.held import PeerHolds
from pzq.cluster.links import ClusterLinks
from pzq.cluster.part import ClusterPart
from pzq.cluster.peer_frames import PeerFrames
from pzq.cluster.peers import PeerTable
from pzq.cluster.placement import Placement
from pzq.cluster.protocols import PeerProtocols
from pzq.cluster.removes import RemoveLedger
from pzq.cluster.replication import PendingAck, ReplicationTracker
from pzq.cluster.restored_telling import RestoredTelling
from pzq.cluster.routes import Routes
from pzq.cluster.scheduled_takeover import ScheduledTakeover
from pzq.cluster.senders import Senders
from pzq.cluster.sends import Reply, Send, ToPeer
from pzq.cluster.settings import ClusterSettings
from pzq.cluster.strangers import Strangers
from pzq.cluster.takeover import StateFactory, Takeovers
from pzq.cluster.unconfirmed import Encoder, UnconfirmedCopies
from pzq.cluster.wrong_endpoints import answered_as_producer_endpoint, is_producer_ack
from pzq.delivery.state import DeliveryState
from pzq.errors import DecodeError
from pzq.events import EventHub, PeersReleased
from pzq.logs import get_logger
from pzq.parts import Part
from pzq.protocol import cluster as cw
from pzq.protocol.routing import CLUSTER_PROTOCOL
from pzq.security import NodeSecurity
from pzq.store.batch import Batch, Participant
from pzq.store.record import ScheduledStored, Stored
from pzq.store.replicas import ReplicaStore, encode_holders
from pzq.store.scheduled import ScheduledArea
from pzq.store.scheduled_copies import ScheduledCopies
from pzq.store.store import Store
from pzq.store.topics import Topics
from pzq.zmqio import Context

log = get_logger("pzq.cluster")

SCHEDULE_PROTOCOL = 3  # the first protocol with SCHEDULE
LEAVING_PROTOCOL = 4  # the first protocol with LEAVING


class ClusterCore(Participant):
    def __init__(self, settings: ClusterSettings, store: Store, make_state: StateFactory,
                 now: float, topics: Topics, client_endpoints: dict[str, str],
                 holds: PeerHolds, hub: EventHub, scheduled: ScheduledArea,
                 own_reads: Callable[[], cw.DefaultReads] = cw.DefaultReads) -> None:
        """``own_reads``: what ``default`` and the named groups read of this node's
        topics now, told to the peers holding copies (TOPICS). ``holds``: own messages
        the peers have out, which the node's delivery states ask about; ``hub``: the
        node's, where what other parts act on is published; ``scheduled``: the node's
        own scheduled messages (one a peer released in a takeover is dropped)."""
        self.settings = settings
        self.node_id = store.node_id
        self.replicas = ReplicaStore(store)
        self.copies = ScheduledCopies(store, self.replicas.removed_before)
        self.peers = PeerTable(settings.nodes, settings.timeout_nodes_s, now)
        self.routes = Routes(Placement(settings.broadcast_dsn, self.peers), client_endpoints,
                             topics)
        self.tracker = ReplicationTracker(settings.replicas, settings.timeout_replication_s)
        self.takeovers = Takeovers(self.replicas, self.copies, self.peers, self.node_id,
                                   make_state, now)
        resend_s = max(0.5, settings.timeout_nodes_s / 4)
        self.removes = RemoveLedger(store, settings.nodes, resend_s)
        # Not again while the producer ACK still waits for the first send's answer
        self.unconfirmed = UnconfirmedCopies(
            self.node_id, max(resend_s, settings.timeout_replication_s),
            max(resend_s, settings.timeout_replication_s, settings.timeout_nodes_s))
        self.done = Dones(self.removes, self.replicas, self.peers, self.takeovers, settings,
                          self.node_id, hub, scheduled, self.copies, self.unconfirmed)
        self.taken_copies = ScheduledTakeover(self.copies, self.takeovers, self.replicas,
                                              self.done)
        self.holds = holds
        self.hub = hub
        self.outgoing: list[Send] = []
        self.rejected = 0  # cluster frames from strangers, or malformed
        self.strangers = Strangers()
        self._after_write: list[Send] = []
        self._synced: set[str] = set()  # peers whose tombstones for us are all applied
        self._rotation = 0
        self.senders = Senders()
        self.protocols = PeerProtocols()  # what each peer speaks (its ROUTING says)
        self.frames = PeerFrames(self.node_id, self.replicas, self.copies, self.done,
                                 self.removes,
                                 self.takeovers, self.routes, self.senders, self.protocols,
                                 self._after_write)
        self.own_reads = own_reads
        self._reads_sent: dict[str, cw.DefaultReads] = {}  # what each peer was last told
        # The seqs this node lost in a restore from a backup, told to each peer with
        # the heartbeats until it keeps them: the holders of copies of them deliver those
        self.lost_seqs = lost_seqs(store.path)
        self.done.lost_seqs = self.lost_seqs
        self.restored = RestoredTelling(self.lost_seqs)

    def open_part(self, context: Context, security: NodeSecurity, own: DeliveryState,
                  now: Now) -> Part:
        """Its part of the node's loop, with its sockets bound and connected."""
        return ClusterPart(ClusterLinks(self, context, security, now.mono), own, self.hub)

    def take_outgoing(self) -> list[Send]:
        outgoing, self.outgoing = self.outgoing, []
        return outgoing

    # -- liveness ------------------------------------------------------------------

    def heartbeat(self, now: float, own: DeliveryState) -> None:
        for endpoint in self.settings.nodes:
            self.outgoing.append(ToPeer(endpoint, cw.encode_ping(self.node_id,
                                                                 self.settings.broadcast_dsn)))
        for peer in self.peers.refresh(now):
            self._counted_down(peer.endpoint, own)
            log.warning("peer_down", endpoint=peer.endpoint,
                        node_id=(peer.node_id or b"?").decode())
        for peer in self.peers.never_reached(now):
            # Else the only sign is REPLICATION_FAILED in every ACK (a wrong --nodes entry?)
            reason = peer.not_a_cluster_endpoint or peer.handshake_refused
            refused = {"reason": reason} if reason else {}
            log.warning("peer_never_reached", endpoint=peer.endpoint,
                        seconds_since_start=round(now - self.peers.started), **refused)
        self.takeovers.update(now)
        self.taken_copies.reset()
        for peer in self.peers.reachable_peers():
            self._send_copies(peer.endpoint, now)
        self.flush_removes(now)
        routing = cw.encode_routing(self.node_id, self.routes.own_routing())
        for peer in self.peers.reachable_peers():
            self.outgoing.append(ToPeer(peer.endpoint, routing))
        self._tell_restored()
        reads = self.own_reads()
        for peer in self.peers.reachable_peers():
            # Again while it says something: a TOPICS frame lost on a full pipe is
            # not answered, so it is repeated rather than confirmed.
            self._tell_reads(peer.endpoint, reads, again=bool(reads.default_from
                                                              or reads.groups))

    def _tell_restored(self) -> None:
        """RESTORED to each reachable peer of protocol 5 or later that has not said it
        keeps the ranges (pzq.cluster.restored_telling)."""
        due = self.restored.due(self.peers, self.protocols)
        if due:
            restored = cw.encode_restored(self.node_id, self.lost_seqs)
            self.outgoing.extend(ToPeer(endpoint, restored) for endpoint in due)

    def _counted_down(self, endpoint: str, own: DeliveryState) -> None:
        """What a peer counted down (silent, or leaving) no longer has."""
        self._synced.discard(endpoint)
        self._reads_sent.pop(endpoint, None)
        if self.holds.drop(endpoint):  # a down peer's consumers cannot ack it
            self._released(own)

    def leave(self) -> None:
        """As the node stops by SIGTERM (its last copies and ACKs sent): LEAVING to
        every peer that reads it (protocol 4 or later; an earlier one would count it
        as a rejected frame)."""
        leaving = cw.encode_leaving(self.node_id)
        for endpoint in self.settings.nodes:
            if self.protocols.spoken.get(endpoint, 0) >= LEAVING_PROTOCOL:
                self.outgoing.append(ToPeer(endpoint, leaving))

    def _left(self, endpoint: str, frames: list[bytes], sender: bytes,
              own: DeliveryState) -> None:
        """A peer said LEAVING: down at once, as after --timeout-nodes of silence (its
        takeover alone keeps that timer: pzq.cluster.peers)."""
        if cw.decode_leaving(frames) != sender:
            raise DecodeError("a node may only say that it leaves itself")
        if self.peers.left(endpoint):
            self._counted_down(endpoint, own)
            log.info("peer_left", endpoint=endpoint, node_id=sender.decode())

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
        we reach it); a peer that is back gets what it missed. A peer that said
        LEAVING counts again from its next PING only. An origin owed dones by its node
        id (outside --nodes when they were owed) is owed them here from now on, before
        the PONG that says what it must hold back."""
        if node_id in self.removes.absent:
            self.removes.found(node_id, endpoint)
        if self.peers.peers[endpoint].left:
            return
        reachable = self.peers.peers[endpoint].reachable
        came_up = (self.peers.answered if answer else self.peers.heard)(endpoint, node_id, now)
        if came_up:
            log.info("peer_up", endpoint=endpoint, node_id=node_id.decode())
            self.takeovers.update(now)
        if answer and not reachable:
            self.removes.forget_sends(endpoint)
            self.unconfirmed.forget_sends(endpoint)
            self._reads_sent.pop(endpoint, None)
            self._tell_reads(endpoint, self.own_reads())
            # at once, not at the next heartbeat: the protocol it says decides whether
            # this node's LEAVING goes to it (a node stopped just after its start)
            self.outgoing.append(ToPeer(endpoint, cw.encode_routing(
                self.node_id, self.routes.own_routing())))
            self._send_copies(endpoint, now)  # before any remove of them (one link, in order)
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

    def replicate_scheduled(self, scheduled: list[ScheduledStored], now: float) -> None:
        """Send a written batch's scheduled messages to ``replicas`` live peers, each
        with its due time (SCHEDULE); their producer ACKs wait as ``replicate``'s do."""
        self._copy([(rid, mid) for rid, mid, _, _, _ in scheduled],
                   [(seq, due_us, value) for _, _, seq, due_us, value in scheduled], now,
                   cw.encode_schedule, self._schedules)

    def _schedules(self, endpoint: str) -> bool:
        """Whether the peer reads SCHEDULE: a peer of an earlier protocol gets no
        scheduled copy (its producer's ACK says REPLICATION_FAILED, as before)."""
        return self.protocols.spoken.get(endpoint, CLUSTER_PROTOCOL) >= SCHEDULE_PROTOCOL

    def _copy(self, producers: list[tuple[bytes, bytes]], messages: list[Any],
              now: float, encode: Encoder = cw.encode_replicate,
              fit: Callable[[str], bool] = lambda endpoint: True) -> None:
        live = [peer for peer in self.peers.reachable_peers() if fit(peer.endpoint)]
        if live:
            self._rotation = (self._rotation + 1) % len(live)
            live = live[self._rotation:] + live[:self._rotation]
        chosen = live[:self.settings.replicas]
        holders = encode_holders(tuple(peer.node_id or b"" for peer in chosen))
        batch_ids = self.tracker.track(producers, [peer.endpoint for peer in chosen], now)
        reads = self.own_reads()
        for endpoint, batch_id in batch_ids.items():
            self._tell_reads(endpoint, reads)  # before the copies it concerns
            self.outgoing.append(ToPeer(endpoint, encode(self.node_id, batch_id, holders,
                                                         messages)))
        self.unconfirmed.sent(encode, holders, messages, batch_ids, now)

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
        """A message ``group`` acked (or gave up) here (see Dones.removed_all)."""
        self.done.removed_all(origin, [seq], group, [final])

    def removed_all(self, origin: bytes, seqs: list[int], group: str,
                    finals: list[bool]) -> None:
        self.done.removed_all(origin, seqs, group, finals)

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

    def owe_removes(self, batch: Batch, now: float) -> None:
        """Persist this wake's removes and dones in its batch (see Dones)."""
        self.done.owe(batch, now)

    def flush_removes(self, now: float) -> None:
        """Send every remove a reachable peer has not confirmed (again after a while)."""
        for peer in self.peers.reachable_peers():
            self._send_removes(peer.endpoint, now)

    def _send_copies(self, endpoint: str, now: float) -> None:
        """Copies the peer has not confirmed, again (see pzq.cluster.unconfirmed)."""
        due = self.unconfirmed.due(endpoint, now)
        if due:
            self._tell_reads(endpoint, self.own_reads())  # before the copies it concerns
        for frames in due:
            self.outgoing.append(ToPeer(endpoint, frames))

    def _send_removes(self, endpoint: str, now: float) -> None:
        due = self.removes.due(endpoint, now)
        if due:  # a group's DONE after TOPICS has named it (one declared just now)
            self._tell_reads(endpoint, self.own_reads())
        for frames in due:
            self.outgoing.append(ToPeer(endpoint, frames))

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
                self.strangers.pinged(endpoint, node_id, self.settings.nodes, now,
                                      self.node_id)
                raise DecodeError(f"PING from {endpoint!r}, which is not in --nodes")
            self.senders.pinged(routing_id, endpoint, node_id)
            self.peers.pinged(endpoint)
            self._heard(endpoint, node_id, now)
            self.outgoing.append(Reply(routing_id, self.frames.pong(node_id, endpoint)))
            return
        sender = self.senders.get(routing_id)
        if sender is None:
            raise DecodeError("cluster frame from a sender that never said PING")
        sender_endpoint, sender_node = sender
        if command == cw.LEAVING:
            self._left(sender_endpoint, frames, sender_node, own)
            return
        self._heard(sender_endpoint, sender_node, now)
        self.frames.handle(command, routing_id, sender_node, frames, batch, own, now)

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
            self._pong(endpoint, cw.decode_pong(frames), batch, own, now)
            return []
        node_id = self.peers.peers[endpoint].node_id
        if node_id is not None:
            self._heard(endpoint, node_id, now, answer=True)
        if command == cw.REPLICATED:
            batch_id = cw.decode_replicated(frames)
            self.unconfirmed.confirmed(endpoint, batch_id)
            return self.tracker.confirm(batch_id, endpoint)
        if command == cw.REMOVED:
            self.removes.confirmed(endpoint, cw.decode_removed(frames))
            return []
        if command == cw.NOTED:
            self.removes.confirmed(endpoint, cw.decode_noted(frames))
            return []
        if command == cw.RESTORED_KEPT:
            self.restored.kept(endpoint, cw.decode_restored_kept(frames))
            return []
        if is_producer_ack(frames):
            answered_as_producer_endpoint(self.peers.peers[endpoint])
        raise DecodeError(f"unknown cluster reply {command[:20]!r}")

    def _pong(self, endpoint: str, pong: cw.Pong, batch: Batch, own: DeliveryState,
              now: float) -> None:
        if self.peers.peers[endpoint].left:
            return  # the stopping process's, on its way: what it held is let go already
        self._heard(endpoint, pong.node_id, now, answer=True)
        if pong.tombstones:
            for seq in pong.tombstones:
                self.done.gone_own(batch, seq, own)
            self._after_write.append(ToPeer(endpoint, cw.encode_applied(pong.tombstones)))
        if self.holds.update(endpoint, set(pong.held)):
            self._released(own)
        if not pong.more:
            self._synced.add(endpoint)

    def _released(self, own: DeliveryState) -> None:
        """A peer let own messages go (gave them up, confirmed them, or went down with
        them out): they were skipped while held, so every reader looks again."""
        own.rewind()
        self.hub.publish(PeersReleased())

    # -- batch participant -------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        self.takeovers.prepare(batch)
        self.removes.prepare(batch)

    def written(self) -> None:
        self.replicas.written()
        self.copies.written()
        self.takeovers.written()
        self.outgoing.extend(self._after_write)
        self._after_write.clear()

    def failed(self) -> None:
        self.replicas.failed()
        self.copies.failed()
        self.takeovers.failed()
        self._after_write.clear()

    # -- monitor -----------------------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, object]:
        peers = peer_figures(self.peers, self.replicas, self.tracker, self.removes,
                             self.holds, self.protocols, now)
        for peer in peers:
            endpoint = str(peer["endpoint"])
            peer.update(self.restored.figures(endpoint),
                        restored_received=self.frames.restored_received[endpoint])
        return {
            "peers": peers,
            "replication_failures": self.tracker.failures,
            "cluster_rejected": self.rejected,
            "replicas_held": sum(self.replicas.counts.values()),
            "scheduled_copies_held": self.copies.held,
            "tombstones_held": sum(self.replicas.tombstones.values()),
            "takeovers": [origin.decode() for origin in self.takeovers.active_origins()],
            "restored_seqs_kept": {origin.decode(): [list(each) for each in ranges]
                                   for origin, ranges in sorted(self.takeovers.lost.items())},
        }
