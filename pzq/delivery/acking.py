"""A consumer's answers to the deliveries of a DeliveryState: ACKs (one, or many in
bulk), NACKs, extensions, rejects, an ACK on another node (``forget``), and what an
ACK would remove, looked at first (``peek``: the archive writes it before it goes).

An ACK may come for a message no longer in flight (given back and waiting, or sent
before a restart and only in the store): it is removed all the same, counted late.
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple, cast

from pzq.delivery.inflight import InFlight, Taken
from pzq.delivery.tracking import Tracking
from pzq.store import record
from pzq.store.batch import Batch

SEQ_OF, VALUE_OF = attrgetter("seq"), attrgetter("value")  # of entries, in C


class Acked(NamedTuple):
    """Deliveries an ACK of many keys removed: their seqs, and when each was sent (0:
    not since the node started)."""

    seqs: list[int]
    sent_us: list[int]


class Acking(Tracking):
    """The answering side of a DeliveryState (pzq.delivery.tracking: its tables)."""

    def ack(self, batch: Batch, seq: int) -> InFlight | None:
        """Remove a message a consumer acknowledged; returns what was removed, None if
        unknown (also one never delivered: see ``_never_sent``)."""
        return self._remove(batch, seq, sent_only=True)

    def done_elsewhere(self, batch: Batch, seq: int) -> InFlight | None:
        """Remove a message finished on another node (a peer's tombstone, a group done
        there), whether or not it went out from here; None if not stored."""
        return self._remove(batch, seq, sent_only=False)

    def _remove(self, batch: Batch, seq: int, sent_only: bool) -> InFlight | None:
        self._table_full = self.idle = False  # (its delete goes with the batch)
        entry = self.inflight.pop(seq)
        if entry is None:
            entry = self._acked_late(batch, seq, sent_only)
            if entry is None:
                return None
        self.owed.delete(batch, self.area, seq, entry.size)
        self.counters.acked += 1
        return entry

    def ack_all(self, batch: Batch, seqs: list[int]) -> tuple[Acked, list[bool], list[int]]:
        """``ack`` of each seq, the in-flight table and the area's deletes done in bulk:
        what was removed, for each whether its message left the store (no other group
        holds it), and the seqs not known."""
        return self.ack_taken(batch, self.take_acked(seqs))

    def take_acked(self, seqs: list[int]) -> Taken:
        """The first half of ``ack_all``, all a delivery pass asks of an ACK: the seqs
        out of the in-flight table (the ``missing`` ones, given back or stored only, are
        the second half's), their deletes owed with the batch being built (a pass that
        reads them again finds them leaving)."""
        self._table_full = self.idle = False  # (their deletes go with the batch)
        taken = self.inflight.take_all(seqs)
        # before the look at the others (a key ACKed twice); the area's deletes are
        # ``ack_taken``'s
        self.owed.delete_run(taken.seqs, taken.sizes, taken.ascending)
        return taken

    def ack_taken(self, batch: Batch, taken: Taken) -> tuple[Acked, list[bool], list[int]]:
        """The second half of ``ack_all`` (``take_acked`` first, in the same batch):
        the seqs not in flight looked for, the deletes into the batch, the topic's
        bookkeeping, the counts. Nothing here changes what a delivery pass sends, so
        where ``taken.missing`` is empty it may follow one (see
        pzq.serving.answers)."""
        seqs, sent_us, sizes = taken.seqs, taken.sent_us, taken.sizes
        unknown: list[int] = []
        if taken.missing:  # given back, or stored only: one by one
            late = self._acked_late_all(batch, taken.missing, unknown)
            seqs, sent_us = seqs + list(map(SEQ_OF, late)), sent_us + [e.sent_us for e in late]
            sizes = sizes + list(map(len, map(VALUE_OF, late)))  # (the run's kept as owed)
        finals = self.area.delete_all(batch, seqs, sizes, taken.ascending and not taken.missing)
        self.counters.acked += len(seqs)
        return Acked(seqs, sent_us), finals, unknown

    def _acked_late_all(self, batch: Batch, seqs: list[int], unknown: list[int]
                        ) -> list[InFlight]:
        """``_acked_late`` of each seq, its delete owed before the next one's look (a
        key ACKed twice); the unknown ones added to ``unknown``."""
        late = []
        for seq in seqs:
            entry = self._acked_late(batch, seq)
            if entry is None:
                unknown.append(seq)
            else:
                self.owed.deleting[seq] = len(entry.value)
                late.append(entry)
        return late

    def _acked_late(self, batch: Batch, seq: int, sent_only: bool = True) -> InFlight | None:
        """An ACK of a message no longer in flight: given back and waiting (its wait's
        key deleted with its ACK), or only in the store; counted late (None: unknown,
        counted so). ``sent_only``: a consumer's, which names a delivery."""
        entry = self.ready.remove(seq) or self.delayed.remove(seq, batch) \
            or self._stored_entry(batch, seq, sent_only)
        if entry is None:
            self.counters.unknown_acks += 1
            return None
        self.counters.late_acks += 1
        return entry

    def peek(self, batch: Batch, seq: int) -> InFlight | None:
        """What ``ack`` would remove, without removing it (to archive it first)."""
        return (self.inflight.get(seq) or self.ready.get(seq) or self.delayed.get(seq)
                or self._stored_entry(batch, seq))

    def peek_all(self, batch: Batch, seqs: list[int]) -> list[InFlight]:
        """``peek`` of each seq, those in flight taken in one step; the unknown left out."""
        found = self.inflight.get_all(seqs)
        if all(found):  # (an entry is always true: no comparison made per entry)
            return cast(list[InFlight], found)
        return [entry for entry in (entry or self.peek(batch, seq)
                                    for seq, entry in zip(seqs, found, strict=True))
                if entry is not None]

    def _stored_entry(self, batch: Batch, seq: int, sent_only: bool = True) -> InFlight | None:
        """A message ACKed after it left memory (e.g. sent before a restart); None, with
        ``sent_only``, for one never delivered, which stays to be delivered (as XACK of
        an id never read changes nothing)."""
        if self.owed.leaving(seq):
            return None
        value = self.area.get(seq)
        if value is None:
            return None
        first_delivered_us, deliveries = record.bookkeeping(value)
        if sent_only and not deliveries and self._never_sent(seq):
            return None
        return InFlight(seq, value, 0, 0, deliveries, first_delivered_us)

    def _never_sent(self, seq: int) -> bool:
        """Whether a stored message without a count never went out from this state: one
        stored since the state was made that the first deliveries did not reach and
        that no priority delivery counted. Of one stored before, nothing is known (it
        may have gone out before a restart: its ACK is taken)."""
        return (seq >= self.cursor and seq >= self.delivered_before
                and seq >= self.stored_before and seq not in self.owed.rewrites
                and seq not in self.owed.rewriting)

    def forget(self, seq: int) -> None:
        """Acked on another node: stop tracking the message here (and write nothing of
        it: a count written after its delete would bring it back)."""
        self.owed.rewrites.pop(seq, None)
        self.inflight.pop(seq)
        self.ready.remove(seq)
        self.delayed.remove(seq)
        self._table_full = False

    def nack(self, seq: int, due_us: int = 0, batch: Batch | None = None) -> bool:
        """Give a delivery back: to go again now, or once ``due_us`` has come (the wait
        kept in ``batch``, the one the NACK came in; else the next one)."""
        self._table_full = False
        entry = self.inflight.pop(seq)
        if entry is None:
            self.counters.unknown_acks += 1
            return False
        self.counters.nacked += 1
        self._give_back(entry, due_us, batch)
        return True

    def extend(self, seq: int, now_us: int) -> bool:
        """The consumer is still at work on it: its deadline starts again (it goes to
        the end of the table, which stays in deadline order)."""
        entry = self.inflight.pop(seq)
        if entry is None:
            return False
        entry.deadline_us = now_us + self.ack_timeout_us
        self.inflight.add(entry)
        return True

    def reject(self, seq: int) -> bool:
        """Given up by its consumer: to the dead letters now, never delivered again."""
        self._table_full = False
        entry = self.inflight.pop(seq) or self.ready.remove(seq) or self.delayed.remove(seq)
        if entry is None:
            self.counters.unknown_acks += 1
            return False
        self._to_dead(entry)
        return True

