"""Deliveries awaiting a consumer ACK, bounded in bytes, oldest first.

Every delivery gets the same ack timeout, so send order is deadline order: one
insertion-ordered dict serves both the reaper (expired entries are at the front)
and the LRU bound (the least recently sent entry is at the front too).

A run of first deliveries (pzq.delivery.first_runs) is tracked compactly: each of
its messages as a tuple (record, sent µs, deadline µs), made in C as the run is added,
and an ACK of many keys takes them back in C too. Everything else sees an InFlight,
made from the tuple when it is asked for (a delivery given back, expired, evicted,
looked at).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, repeat
from operator import itemgetter
from typing import NamedTuple, cast

from pzq.delivery.entries import SeqTable


@dataclass(slots=True)
class InFlight:
    seq: int
    value: bytes  # the stored record, so a give-back needs no store read
    sent_us: int
    deadline_us: int
    deliveries: int
    first_delivered_us: int

    @property
    def size(self) -> int:
        return len(self.value)


# A first delivery of a run, as the table holds it: record, sent µs, deadline µs (its
# count is 1 and it was first delivered when sent).
Sent = tuple[bytes, int, int]
Held = InFlight | Sent
RECORD, SENT_US, DEADLINE_US = itemgetter(0), itemgetter(1), itemgetter(2)  # of a Sent
NONE_EVICTED: list[InFlight] = []  # (never changed: no list made per delivery)


def entry_of(seq: int, held: Held) -> InFlight:
    """The table's entry for ``seq`` as an InFlight."""
    if held.__class__ is tuple:
        value, sent_us, deadline_us = held
        return InFlight(seq, value, sent_us, deadline_us, 1, sent_us)
    return cast(InFlight, held)


class Taken(NamedTuple):
    """Deliveries an ACK took from the table: their seqs, records and when each was
    sent, in the order asked; and the seqs the table did not hold."""

    seqs: list[int]
    values: list[bytes]
    sent_us: list[int]
    missing: list[int]


class InFlightTable(SeqTable[Held]):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.bytes = 0

    def entries(self) -> list[InFlight]:
        return list(map(entry_of, self._entries, self._entries.values()))

    def lowest(self) -> InFlight | None:
        """The entry of the lowest seq (a walk of the table: for figures, not per message)."""
        seq = min(self._entries, default=None)
        return None if seq is None else entry_of(seq, self._entries[seq])

    def get(self, seq: int) -> InFlight | None:
        held = self._entries.get(seq)
        return None if held is None else entry_of(seq, held)

    def get_all(self, seqs: list[int]) -> list[InFlight | None]:
        """``get`` of each seq (for the archive of an ACK's many: an InFlight each),
        a run's deliveries made into entries with no call a message but the entry's."""
        held = list(map(self._entries.get, seqs))
        if not all(map(isinstance, held, repeat(tuple))):  # (given back, or not held)
            return list(map(self.get, seqs))
        sents = cast(list[Sent], held)
        sent_us = list(map(SENT_US, sents))
        return list(map(InFlight, seqs, map(RECORD, sents), sent_us, map(DEADLINE_US, sents),
                        repeat(1), sent_us))

    def oldest(self) -> InFlight | None:
        for seq, held in self._entries.items():
            return entry_of(seq, held)
        return None

    def add(self, entry: InFlight) -> list[InFlight]:
        """Track a delivery; returns the entries evicted to stay within max_bytes.

        The new entry itself is never evicted, even when it alone is larger.
        """
        self._entries[entry.seq] = entry
        self.bytes += len(entry.value)
        if self.bytes <= self.max_bytes:
            return NONE_EVICTED
        evicted = []
        while self.bytes > self.max_bytes and len(self._entries) > 1:
            evicted.append(self._pop_first())
        return evicted

    def add_run(self, seqs: list[int], values: list[bytes], sent_us: int, deadline_us: int,
                size: int) -> None:
        """Track first deliveries sent at ``sent_us``, newer than any in the table, whose
        records are ``size`` bytes together, known to fit within max_bytes (nothing is
        evicted)."""
        self._entries.update(zip(seqs, zip(values, repeat(sent_us), repeat(deadline_us)),
                                 strict=True))
        self.bytes += size

    def pop(self, seq: int) -> InFlight | None:
        held = self._entries.pop(seq, None)
        if held is None:
            return None
        entry = entry_of(seq, held)
        self.bytes -= len(entry.value)
        return entry

    def take_all(self, seqs: list[int]) -> Taken:
        """``pop`` of each seq, the table walked in C and no InFlight made for a run's
        delivery (a seq given twice is held once: missing the second time)."""
        found = list(map(self._entries.pop, seqs, repeat(None)))
        missing: list[int] = []
        if None in found:
            held = [entry is not None for entry in found]
            missing = [seq for seq, entry in zip(seqs, found, strict=True) if entry is None]
            seqs, found = list(compress(seqs, held)), list(compress(found, held))
        if all(map(isinstance, found, repeat(tuple))):  # (the common ACK: runs only)
            sents = cast(list[Sent], found)
            values, sent_us = list(map(RECORD, sents)), list(map(SENT_US, sents))
        else:
            entries = list(map(entry_of, seqs, cast(list[Held], found)))
            values = [entry.value for entry in entries]
            sent_us = [entry.sent_us for entry in entries]
        self.bytes -= sum(map(len, values))
        return Taken(seqs, values, sent_us, missing)

    def expire(self, now_us: int) -> list[InFlight]:
        """Remove and return every entry whose deadline has passed."""
        expired = []
        while (oldest := self.oldest()) is not None and oldest.deadline_us <= now_us:
            expired.append(self._pop_first())
        return expired

    def _pop_first(self) -> InFlight:
        seq, held = self._entries.popitem(last=False)
        entry = entry_of(seq, held)
        self.bytes -= len(entry.value)
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
