"""What a peer's frame does here, once its sender said PING (pzq.cluster.core answers
PING and keeps who is alive): one handler per command, through one table. Copies
are stored, removes and dones applied, tombstones dropped, a peer's topics and
routes noted, scheduled copies kept until their origin releases them;
confirmations wait for the batch that holds what they confirm
(``after_write``, shared with the core, which sends them once it is written).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from operator import itemgetter

from pzq.cluster.done import Dones
from pzq.cluster.protocols import PeerProtocols
from pzq.cluster.removes import RemoveLedger
from pzq.cluster.routes import Routes
from pzq.cluster.senders import Senders
from pzq.cluster.sends import Reply, Send
from pzq.cluster.takeover import Takeovers
from pzq.delivery.state import DeliveryState
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.protocol import cluster as cw
from pzq.store.batch import Batch
from pzq.store.replicas import ReplicaStore, decode_holders
from pzq.store.scheduled_copies import ScheduledCopies

log = get_logger("pzq.cluster")
SEQ_OF = itemgetter(0)
RESTORED_KEPT_PROTOCOL = 6  # the first protocol with RESTORED_KEPT

TOMBSTONES_PER_PONG = 10_000
HELD_PER_PONG = 10_000
# routing id, sender's node id, frames, the wake's batch, own delivery state, now
Handler = Callable[[bytes, bytes, list[bytes], Batch, DeliveryState, float], None]


class PeerFrames:
    def __init__(self, node_id: bytes, replicas: ReplicaStore, copies: ScheduledCopies,
                 done: Dones, removes: RemoveLedger, takeovers: Takeovers, routes: Routes,
                 senders: Senders, protocols: PeerProtocols, after_write: list[Send]) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.copies = copies
        self.done = done
        self.removes = removes
        self.takeovers = takeovers
        self.routes = routes
        self.senders = senders
        self.protocols = protocols
        self.after_write = after_write
        self.restored_received: Counter[str] = Counter()  # RESTORED frames, by sender
        # A frame's command -> what a peer's frame does here (PING is answered first)
        self.handlers: dict[bytes, Handler] = {
            cw.REPLICATE: self._on_replicate, cw.SCHEDULE: self._on_schedule,
            cw.REMOVE: self._on_remove,
            cw.DONE: self._on_done, cw.APPLIED: self._on_applied, cw.TOPICS: self._on_topics,
            cw.ROUTING: self._on_routing, cw.RESTORED: self._on_restored}

    def handle(self, command: bytes, routing_id: bytes, sender: bytes, frames: list[bytes],
               batch: Batch, own: DeliveryState, now: float) -> None:
        handle = self.handlers.get(command)
        if handle is None:
            raise DecodeError(f"unknown cluster command {command[:20]!r}")
        handle(routing_id, sender, frames, batch, own, now)

    def pong(self, node_id: bytes, endpoint: str) -> list[bytes]:
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

    def _confirm_once_written(self, routing_id: bytes, frames: list[bytes]) -> None:
        """The answer goes once the wake's batch, which holds what it confirms, is
        written (the core sends ``after_write`` then)."""
        self.after_write.append(Reply(routing_id, frames))

    # -- one handler per frame a peer sends, after its PING -----------------------------

    def _on_replicate(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                      batch: Batch, own: DeliveryState, now: float) -> None:
        replicate = cw.decode_replicate(frames)
        _own(replicate.origin, sender, "replicate its own messages")
        holders = decode_holders(replicate.holders)
        log.debug("replicas_received", origin=sender.decode(),
                  batch_id=replicate.batch_id, messages=len(replicate.messages))
        replicas = self.replicas
        for seq, value in replicate.messages:
            replicas.add(batch, replicate.origin, seq, holders, value)
        if replicas.early_dones:  # (the only cost when nothing is remembered)
            # Groups done with some before they came (a survivor's DONE): marked
            replicas.mark_late_copies(batch, replicate.origin, map(SEQ_OF, replicate.messages))
        self._confirm_once_written(routing_id, cw.encode_replicated(replicate.batch_id))

    def _on_schedule(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                     batch: Batch, own: DeliveryState, now: float) -> None:
        schedule = cw.decode_schedule(frames)
        _own(schedule.origin, sender, "replicate its own messages")
        holders = decode_holders(schedule.holders)
        for seq, due_us, value in schedule.messages:
            self.copies.add(batch, schedule.origin, seq, due_us, holders, value)
        self._confirm_once_written(routing_id, cw.encode_replicated(schedule.batch_id))

    def _on_remove(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                   batch: Batch, own: DeliveryState, now: float) -> None:
        origin, remove_id, seqs = cw.decode_remove(frames)
        self.done.apply_remove(origin, seqs, batch, own, now)
        if origin != sender and origin != self.node_id:
            # A node that took the origin over removed them: the origin, back, may
            # send a copy again that it never heard confirmed (pzq.cluster.unconfirmed)
            self.replicas.remember_removed(origin, seqs)
        self._confirm_once_written(routing_id, cw.encode_removed(remove_id))

    def _on_done(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                 batch: Batch, own: DeliveryState, now: float) -> None:
        origin, done_id, group, seqs = cw.decode_done(frames)
        self.done.apply_done(origin, group, seqs, batch, own, sender, now)
        self._confirm_once_written(routing_id, cw.encode_noted(done_id))

    def _on_applied(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                    batch: Batch, own: DeliveryState, now: float) -> None:
        self.replicas.drop_tombstones(batch, sender, cw.decode_applied(frames))

    def _on_topics(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                   batch: Batch, own: DeliveryState, now: float) -> None:
        origin, reads = cw.decode_topics(frames)
        _own(origin, sender, "describe its own topics")
        self.replicas.describe_topics(batch, origin, reads)

    def _on_routing(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                    batch: Batch, own: DeliveryState, now: float) -> None:
        origin, routing = cw.decode_routing_frame(frames)
        _own(origin, sender, "describe its own routes")
        endpoint, _ = self.senders.get(routing_id) or ("", b"")
        self.protocols.heard(endpoint, routing.protocol)
        self.routes.learned(endpoint, routing)

    def _on_restored(self, routing_id: bytes, sender: bytes, frames: list[bytes],
                     batch: Batch, own: DeliveryState, now: float) -> None:
        origin, ranges = cw.decode_restored(frames)
        _own(origin, sender, "say what its own restore lost")
        endpoint, _ = self.senders.get(routing_id) or ("", b"")
        self.restored_received[endpoint] += 1
        self.takeovers.restored(batch, origin, ranges)
        # Confirmed once kept on disk; an origin of protocol 5 would refuse the answer
        if self.protocols.spoken.get(endpoint, 0) >= RESTORED_KEPT_PROTOCOL:
            self._confirm_once_written(routing_id, cw.encode_restored_kept(ranges))


def _own(origin: bytes, sender: bytes, what: str) -> None:
    """A peer speaks for itself only: a frame naming another origin is refused."""
    if origin != sender:
        raise DecodeError(f"a node may only {what}")
