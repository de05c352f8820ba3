"""What the nodes tell each other when messages are done with: removes and dones,
owed to the peers and applied when they come.

A message every group is done with goes everywhere (REMOVE). A group done with a
message other groups still hold leaves a mark wherever the message or a copy of it
is (DONE), so that:
- the holders of an origin's copies do not serve that group again in a takeover;
- the origin, when it returns from being down, does not deliver again what a group
  finished on the node that took over (and deletes it once every group is done).

A remove of a scheduled message (its origin released it, or a node that took the
origin over did) drops the holders' scheduled copies, and the origin's scheduled
message when a survivor released it (``gone_own``).

Both are persisted in the batch of the ACK that caused them and sent again until
each peer answers (``pzq.cluster.removes``). A DONE for the origin is kept while the
origin is down, to be sent when it answers again; until then the origin holds
those messages back (they are in the ``held`` of our PONG). So is one for an origin
outside this run's --nodes (a shard store a run with fewer shards left unused): kept
by its node id, it goes to the endpoint the origin is heard at once it returns.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import compress
from operator import not_

from pzq.cluster.peers import PeerTable
from pzq.cluster.removes import RemoveLedger, absent_peer
from pzq.cluster.settings import ClusterSettings
from pzq.cluster.takeover import Takeovers
from pzq.cluster.unconfirmed import UnconfirmedCopies
from pzq.delivery.state import DeliveryState
from pzq.events import EventHub, GroupDoneElsewhere
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.store.batch import Batch
from pzq.store.replicas import ReplicaStore
from pzq.store.scheduled import ScheduledArea
from pzq.store.scheduled_copies import ScheduledCopies


class Dones:
    def __init__(self, ledger: RemoveLedger, replicas: ReplicaStore, peers: PeerTable,
                 takeovers: Takeovers, settings: ClusterSettings, node_id: bytes,
                 hub: EventHub, scheduled: ScheduledArea, copies: ScheduledCopies,
                 unconfirmed: UnconfirmedCopies) -> None:
        self.ledger = ledger
        self.unconfirmed = unconfirmed  # own copies a peer may get again: not these
        self.replicas = replicas
        self.scheduled = scheduled  # own scheduled messages: one a peer released goes
        self.copies = copies  # scheduled copies held for peers
        self.peers = peers
        self.takeovers = takeovers
        self.hub = hub  # own named groups done elsewhere: published, for their endpoint
        self.settings = settings
        self.node_id = node_id
        self._removes: defaultdict[bytes, list[int]] = defaultdict(list)
        self._dones: defaultdict[tuple[bytes, str], list[int]] = defaultdict(list)
        self.lost_seqs: list[tuple[int, int]] = []  # own seqs lost in a restore (core's)

    def removed_own(self, seqs: list[int]) -> None:
        """Own messages every group is done with: every holder drops its copy."""
        if self.settings.replicas and seqs:
            self.unconfirmed.forget(seqs)
            self._removes[self.node_id].extend(seqs)

    def done_own(self, group: str, seqs: list[int]) -> None:
        """Own messages ``group`` is done with while others hold them: the holders mark
        their copies."""
        if self.settings.replicas and seqs:
            self.unconfirmed.forget(seqs)  # a copy sent after the DONE would lack its mark
            self._dones[(self.node_id, group)].extend(seqs)

    def removed_all(self, origin: bytes, seqs: list[int], group: str,
                    finals: list[bool]) -> None:
        """Messages ``group`` acked (or gave up) here; ``finals``: whether each was the
        last group holding it. Every holder drops its copy once every group is done,
        and marks it for the group before that."""
        if origin != self.node_id:
            self.taken_over(origin, seqs, group)
            return
        if not self.settings.replicas:  # no copies anywhere: nothing to tell, no lists
            return
        self.removed_own(list(compress(seqs, finals)))
        self.done_own(group, list(compress(seqs, map(not_, finals))))

    def taken_over(self, origin: bytes, seqs: list[int], group: str) -> None:
        """Taken-over messages ``group`` acked or gave up here (the copy is marked, or
        dropped when it was the last group). A copy dropped goes everywhere; the
        origin learns of ``default``'s last done from the tombstone, of every other
        done from DONE."""
        removed = []
        for seq in seqs:
            dropped = not self.replicas.holds(origin, seq)
            if dropped:
                removed.append(seq)
            if group != DEFAULT_GROUP or not dropped:
                self._dones[(origin, group)].append(seq)
        if removed:
            self._removes[origin].extend(removed)
            # The origin, back, may send again a copy it never heard confirmed
            # (pzq.cluster.unconfirmed): dropped when it comes
            self.replicas.remember_removed(origin, removed)

    def owe(self, batch: Batch, now: float) -> None:
        """Persist this wake's removes and dones in its batch: each peer owes a
        confirmation. A down origin of taken-over messages collects tombstones
        instead of removes, and is owed its dones until it answers."""
        for origin, seqs in self._removes.items():
            peers = set(self.settings.nodes)
            origin_endpoint = self.peers.endpoint_of(origin)
            if origin != self.node_id and not self.peers.node_alive(origin, now):
                peers.discard(origin_endpoint or "")
            self.ledger.owe(batch, origin, seqs, peers)
        for (origin, group), seqs in self._dones.items():
            peers = set(self.settings.nodes)
            if origin != self.node_id and self.peers.endpoint_of(origin) is None:
                # Not heard in this run (outside --nodes, a shard store left unused, or
                # down since the start): owed by its node id until it is heard again
                peers.add(absent_peer(origin))
            self.ledger.owe(batch, origin, seqs, peers, group)
        self._removes.clear()
        self._dones.clear()

    # -- coming in --------------------------------------------------------------------

    def apply_remove(self, origin: bytes, seqs: list[int], batch: Batch,
                     own: DeliveryState, now: float) -> None:
        """Every group is done with these messages: ours (taken over while we were
        away), or copies we hold (a tombstone kept for an origin that is down)."""
        if origin == self.node_id:
            for seq in seqs:
                self.gone_own(batch, seq, own)
            return
        origin_down = not self.peers.node_alive(origin, now)
        released, seqs = self.copies.remove_any(batch, origin, seqs)
        if origin_down:  # a scheduled copy released: the origin learns it at its return
            for seq in released:
                self.replicas.tombstone(batch, origin, seq)
        self.takeovers.forget_all(origin, seqs)
        self.replicas.remove_all(batch, origin, seqs, tombstone=origin_down)

    def gone_own(self, batch: Batch, seq: int, own: DeliveryState) -> None:
        """An own message done with elsewhere (a peer's tombstone or remove): acked, or,
        when it is still scheduled here, released by the peer that took this node over."""
        self.unconfirmed.forget([seq])
        if self.lost_seqs and any(first <= seq < end for first, end in self.lost_seqs):
            return  # lost in a restore, delivered by the peer: nothing of it is here
        if not self.scheduled.drop(batch, seq):
            own.done_elsewhere(batch, seq)

    def apply_done(self, origin: bytes, group: str, seqs: list[int], batch: Batch,
                   own: DeliveryState, sender: bytes, now: float) -> None:
        """A group is done with messages: ours (finished on a node that took them
        over), or copies we hold (marked, dropped once every group is done). One from
        a node that took the origin over is remembered for a copy not here yet: the
        origin, back, may send it again (pzq.cluster.unconfirmed), unmarked. (The
        origin's own DONE follows any copy it sent on the same link, and it sends
        none after.)"""
        if origin == self.node_id:
            self.unconfirmed.forget(seqs)
            if group != DEFAULT_GROUP:
                self.hub.publish(GroupDoneElsewhere(batch, group, seqs))
                return
            for seq in seqs:
                own.done_elsewhere(batch, seq)
            return
        remember_at = now if sender != origin else None
        for seq in seqs:
            self.takeovers.forget(origin, seq, group)
            self.replicas.group_done(batch, origin, seq, group, tombstone=False,
                                     remember_at=remember_at)
