"""What a group's consumers' answers do, whichever endpoint they came on: ACKs (the
message archived, when the archive is on, and deleted once no group holds it), NACKs
(given back, at once or after a delay), messages the group gave up (to the dead
letters), and expiry at the reaper's tick.

Every group is served by this one path, ``default`` on --send-dsn as much as a named
group on --consume-dsn, so a delivery feature is built once. Each answer touches only
what the consumer holds: a delivery that expired at it and went to another consumer
is that one's now (its credit comes back, nothing more).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress

from pzq.archive.contract import ArchiveWrites
from pzq.bulk import low_high
from pzq.delivery.inflight import Taken
from pzq.delivery.state import DeliveryState
from pzq.logs import get_logger
from pzq.protocol.message_keys import (
    KeyNumbers,
    message_key,
    message_key_numbers,
    parse_message_key,
)
from pzq.serving.holding import GroupDelivery, Key, SentKeys, ServedConsumer
from pzq.store.batch import Batch

log = get_logger("pzq.answers")

# The bulk path has a cost per call (its lists, one match, the topic's counts) that a
# single key does not win back: a consumer ACKing each delivery alone (protocol 1,
# --send-dsn) cost the node 45 µs a message through it against 35 one by one.
BULK_ACK_KEYS = 4

# an ACK's second half left for ``settle``: its group, state, origin, what its first
# half took, and the time it came (µs of the wall clock, and monotonic)
_Later = tuple[GroupDelivery, DeliveryState, bytes, Taken, int, float]
# origin, seq, group, final: done with here; final: deleted, drop the copies
Removed = Callable[[bytes, int, str, bool], None]
# the same for many seqs of one origin, each with its final
RemovedAll = Callable[[bytes, list[int], str, list[bool]], None]


class GroupAnswers:
    def __init__(self, archiving: ArchiveWrites, removed: Removed,
                 removed_all: RemovedAll) -> None:
        self.archiving = archiving
        self.removed = removed
        self.removed_all = removed_all
        # With an archive a message's last holder writes it before its delete (an ACK of
        # many keys writes its messages in one call).
        self.archives = archiving.writes
        # ACKs whose first half is taken (``ack_numbers``'s ``later``): their second
        # half, for ``settle``
        self._later: list[_Later] = []

    def answer(self, batch: Batch, consumer: ServedConsumer, ok: bool, keys: Iterable[bytes],
               now_us: int, mono: float, due_us: int = 0) -> None:
        """ACK (``ok``) or NACK each key (a NACK's message goes again at ``due_us``)."""
        if self._later:  # (the ACKs before it in the same order as they came)
            self.settle(batch)
        keys = keys if isinstance(keys, (list, tuple)) else list(keys)
        if ok and len(keys) >= BULK_ACK_KEYS:
            parsed = message_key_numbers(keys)
            if parsed is not None:  # else one is no key: each in turn, up to that one
                self._ack_all(batch, consumer, *parsed, now_us, mono)
                return
        self._answer_each(batch, consumer, ok, keys, now_us, mono, due_us)

    def ack_numbers(self, batch: Batch, consumer: ServedConsumer, numbers: KeyNumbers,
                    now_us: int, mono: float, later: bool = False) -> None:
        """``answer`` of an ACK of BULK_ACK_KEYS keys or more, read into numbers already
        (``consume.ack_key_numbers``). ``later``: where all it names of the own
        messages is in flight and no archive writes them, only what a delivery pass
        asks of it is done now (out of the in-flight table, the deletes owed, the
        consumer's credit back), and the rest (the deletes into the batch, the
        topic's marks, counts, latency) waits for ``settle``, which the caller owes
        before anything else touches the group's tables and before the batch is
        written."""
        self._ack_all(batch, consumer, *numbers, now_us, mono, later)

    def ack_as_sent(self, batch: Batch, consumer: ServedConsumer, sent: SentKeys,
                    now_us: int, mono: float) -> bool:
        """The common cycle's ACK, in one call: ``ack_numbers`` (``later``) of the keys
        of ``sent``, the consumer's last BATCH, which its ACK named just as sent, where
        they are the own messages, it holds them as that run still (no NACK, expiry or
        eviction put its runs in its set since), nothing it let expire waits for its
        credit and no archive writes them. False: another case, nothing done (the
        general path takes it)."""
        seqs = sent[2]
        runs = consumer.held_runs
        if not runs or runs[-1] is not seqs or consumer.overdue or self.archives:
            return False
        deliveries = consumer.group
        if sent[1] != deliveries.own_number:
            return False
        state = deliveries.state
        taken = state.take_acked(seqs)
        if taken.missing:  # (not seen: a held run's seqs are in flight) the whole ACK now
            self.settle(batch)
            acked = self._ack_taken(batch, deliveries, state, deliveries.own_id, taken,
                                    now_us, mono)
            if len(acked) != len(seqs):
                deliveries.let_go(seqs, consumer)
                return True
        else:
            self._later.append((deliveries, state, deliveries.own_id, taken, now_us, mono))
        del runs[-1]  # the run it held goes whole (its keys are the seqs sent)
        consumer.held_in_runs -= len(seqs)
        return True

    def settle(self, batch: Batch) -> None:
        """The second half of the ACKs ``ack_numbers`` left for later, into ``batch``
        (the one their first half was taken in), in the order they came."""
        if not self._later:
            return
        later, self._later = self._later, []
        for deliveries, state, origin, taken, now_us, mono in later:
            self._ack_taken(batch, deliveries, state, origin, taken, now_us, mono)

    def _answer_each(self, batch: Batch, consumer: ServedConsumer, ok: bool, keys: Iterable[bytes],
                     now_us: int, mono: float, due_us: int) -> None:
        deliveries = consumer.group
        own = deliveries.state
        own_id = own.area.node_id
        overdue = consumer.overdue
        for key in keys:
            node_id, seq = parse_message_key(key)
            key_held = deliveries.key_of(node_id, seq)
            # it let this one expire: its credit comes back (no hashing while none did)
            late = key_held in overdue if overdue else False
            if late:
                overdue.discard(key_held)
            state = own if node_id == own_id else deliveries.state_for(node_id)
            if state is None:
                deliveries.counters.unknown_acks += 1
            elif not ok:
                self._nack(batch, consumer, state, key_held, seq, late, due_us)
            else:
                deliveries.release(key_held, consumer)  # whoever has it now: it is done
                if not self.ack(batch, deliveries, state, key, seq, now_us, mono):
                    log.debug("ack_unknown", key=key.decode(), group=deliveries.name)

    def _ack_all(self, batch: Batch, consumer: ServedConsumer, node_ids: tuple[int, ...],
                 seqs: tuple[int, ...], now_us: int, mono: float, later: bool = False) -> None:
        """ACKs of many keys (``message_key_numbers``: their node ids as numbers, and
        seqs): each state's messages are done with in one call (``ack`` for each, in
        bulk, the keys walked in C), after the archive's writes; ``later``: see
        ``ack_numbers``."""
        deliveries = consumer.group
        first, last = low_high(node_ids)  # (count() compared each key's)
        by_origin = ({first: list(seqs)} if first == last
                     else _by_origin(node_ids, seqs))  # taken-over messages too
        for number, origin_seqs in by_origin.items():
            base = deliveries.base_of(number)  # (0: the own's keys are the seqs)
            keys = list(map(base.__or__, origin_seqs)) if base else origin_seqs
            if consumer.overdue:  # those it let expire: their credit comes back
                consumer.overdue.difference_update(keys)
            origin = b"%08x" % number
            state = deliveries.state_for(origin)
            if state is None:
                deliveries.counters.unknown_acks += len(keys)
                continue
            if later and state is deliveries.state and not self.archives:
                acked = self._ack_later(batch, deliveries, state, origin, origin_seqs, now_us,
                                        mono)
            else:
                if self._later:
                    self.settle(batch)
                acked = self._ack_from(batch, deliveries, state, origin, origin_seqs, now_us,
                                       mono)
            # whoever holds them is done with them: the own's by the seqs the state took
            # (the read's int objects: each found in the held set by identity), and
            # every key asked where it took fewer
            deliveries.let_go(acked if not base and len(acked) == len(keys) else keys, consumer)

    def _ack_later(self, batch: Batch, deliveries: GroupDelivery, state: DeliveryState,
                   origin: bytes, seqs: list[int], now_us: int, mono: float) -> list[int]:
        """``_ack_from`` of the own messages, no archive on: its second half left for
        ``settle`` where every seq was in flight; returns the seqs acked. One that was
        not (given back: waiting in the ``ready`` or ``delayed`` table, which a pass
        sends from; stored only; ACKed twice) has the whole ACK done now, after those
        left before it."""
        taken = state.take_acked(seqs)
        if not taken.missing:
            self._later.append((deliveries, state, origin, taken, now_us, mono))
            return taken.seqs
        self.settle(batch)
        return self._ack_taken(batch, deliveries, state, origin, taken, now_us, mono)

    def _ack_from(self, batch: Batch, deliveries: GroupDelivery, state: DeliveryState,
                  origin: bytes, seqs: list[int], now_us: int, mono: float) -> list[int]:
        """The ACKs of one origin's seqs; returns the seqs acked."""
        if self.archives:
            seqs = self._archived(batch, state, seqs, now_us)
        return self._ack_taken(batch, deliveries, state, origin, state.take_acked(seqs),
                               now_us, mono)

    def _ack_taken(self, batch: Batch, deliveries: GroupDelivery, state: DeliveryState,
                   origin: bytes, taken: Taken, now_us: int, mono: float) -> list[int]:
        """The ACKs' second half (``DeliveryState.ack_taken``), the copies' holders told
        and the latency kept; returns the seqs acked."""
        acked, finals, unknown = state.ack_taken(batch, taken)
        for seq in unknown:
            log.debug("ack_unknown", key=message_key(origin, seq).decode(),
                      group=deliveries.name)
        self.removed_all(origin, acked.seqs, deliveries.name, finals)
        deliveries.latency.add_sent(mono, now_us, acked.sent_us)
        return acked.seqs

    def _archived(self, batch: Batch, state: DeliveryState, seqs: list[int],
                  now_us: int) -> list[int]:
        """The archive's write of the messages whose last holder this group is (each key
        once), in one call before the ACKs; returns the seqs to ACK: one whose write
        failed stays stored, to be delivered again."""
        once = list(dict.fromkeys(seqs))
        finals = list(compress(once, state.area.would_release_all(once)))
        kept = self.archiving.acked_all(state, batch, finals, now_us) if finals else None
        return [seq for seq in seqs if seq not in kept] if kept else seqs

    def _nack(self, batch: Batch, consumer: ServedConsumer, state: DeliveryState, key: Key,
              seq: int, late: bool, due_us: int) -> None:
        """Give back what this consumer holds (to go again at once, or at ``due_us``,
        the wait kept in ``batch``); a NACK of what expired here was given back at its
        deadline, and another consumer may have it now: left alone."""
        if consumer.pool:  # nothing is kept per delivery to the pool (--send-dsn)
            state.nack(seq, due_us, batch)
        elif key in (consumer.held if consumer.held_runs else consumer.held_alone):
            consumer.held_alone.discard(key)  # (the runs it held are in the set now)
            state.nack(seq, due_us, batch)
        elif not late:
            state.counters.unknown_acks += 1

    def ack(self, batch: Batch, deliveries: GroupDelivery, state: DeliveryState,
            key: bytes, seq: int, now_us: int, mono: float) -> bool:
        """The group is done with the message: archived if it is the last holder (not
        archived: kept, to be delivered again), deleted or marked; the holders of its
        copies are told. False: the state did not know the delivery."""
        final = state.area.would_release(seq)
        if final and not self.archiving.acked(state, batch, key, seq, now_us):
            return True  # kept stored: it will be delivered again
        entry = state.ack(batch, seq)
        if entry is None:
            return False
        self.removed(state.area.node_id, seq, deliveries.name, final)
        if entry.sent_us:
            deliveries.latency.add(mono, (now_us - entry.sent_us) / 1e6)
        return True

    def retire_dead(self, deliveries: GroupDelivery, now_us: int,
                    states: list[DeliveryState] | None = None) -> None:
        """Messages the group gave up (counted already): the group is done with them.
        One no other group holds moves to the dead letters with the next batch and is
        archived now, naming the groups that held it (a failed write leaves it in the
        dead letters); one others still hold is archived once they are done with it.
        ``states``: the group's every_state, when the caller asked already."""
        for state in deliveries.every_state() if states is None else states:
            if not (state.newly_dead or state.newly_dropped):
                continue  # (most wakes: none gone, no calls)
            area = state.area
            for entry in state.take_newly_dead():
                final = area.would_release(entry.seq)
                if final:
                    self.archiving.given_up_by_last_group(entry, now_us, area.node_id,
                                                          area.group_names(entry.seq))
                self.removed(area.node_id, entry.seq, deliveries.name, final)
            for entry in state.take_newly_dropped():  # expired: deleted, not archived
                self.removed(area.node_id, entry.seq, deliveries.name,
                             area.would_release(entry.seq))

    def reap(self, deliveries: GroupDelivery, now_us: int) -> int:
        """Expired deliveries back (overdue at the consumer that let them expire; a
        takeover's states are reaped with the takeover); returns how many expired."""
        expired = deliveries.state.reap(now_us)
        if expired or deliveries.taken_over():
            deliveries.settle(expired=True)
        self.retire_dead(deliveries, now_us)
        return expired


def _by_origin(node_ids: tuple[int, ...], seqs: tuple[int, ...]) -> dict[int, list[int]]:
    """The seqs of each origin (by its node id's number), in the ACK's order."""
    found: dict[int, list[int]] = {}
    for number, seq in zip(node_ids, seqs, strict=True):
        found.setdefault(number, []).append(seq)
    return found

