"""Deliveries awaiting a consumer ACK, bounded in bytes, oldest first.

Every delivery gets the same ack timeout, so send order is deadline order: the
reaper takes expired entries from the front, and the LRU bound evicts the least
recently sent from the front too.

A run of first deliveries (pzq.delivery.first_runs) is tracked compactly: each of
its messages as a tuple (record, sent µs, deadline µs) in a plain dict, made in C as
the run is added, and an ACK of many keys takes them back in C too; the run's order
is kept once for the run (its seqs, as sent), not per message. Anything else (a
delivery sent alone: given back, a lane's, extended) is an InFlight in an
insertion-ordered table. The oldest entry is the older of the two fronts (a run's
first on equal deadlines: sent in the same wake, the one sent alone is never older).
Everything outside sees an InFlight, made from the tuple when it is asked for (a
delivery given back, expired, evicted, looked at).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from heapq import merge
from itertools import compress, count, repeat
from operator import attrgetter, itemgetter
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
DEADLINE_OF = attrgetter("deadline_us")  # of an InFlight
NONE_EVICTED: list[InFlight] = []  # (never changed: no list made per delivery)


def entry_of(seq: int, held: Held) -> InFlight:
    """The table's entry for ``seq`` as an InFlight."""
    if held.__class__ is tuple:
        value, sent_us, deadline_us = held
        return InFlight(seq, value, sent_us, deadline_us, 1, sent_us)
    return cast(InFlight, held)


class Taken(NamedTuple):
    """Deliveries an ACK took from the table: their seqs, their records' sizes and when
    each was sent, in the order asked; and the seqs the table did not hold."""

    seqs: list[int]
    sizes: list[int]
    sent_us: list[int]
    missing: list[int]


@dataclass(slots=True)
class RunOrder:
    """A run's place in the send order: its seqs as sent, and from where on in them
    one may still be out (those before are not)."""

    seqs: list[int]
    deadline_us: int
    at: int = 0


COMPACT_PAST = 4096  # run seqs kept past those still out, at most twice as many and this


class InFlightTable(SeqTable[InFlight]):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()  # the deliveries sent alone, in the order sent
        self.max_bytes = max_bytes
        self.bytes = 0
        self._sent: dict[int, Sent] = {}  # the runs' deliveries still out
        self._runs: deque[RunOrder] = deque()  # the runs, in the order sent
        self._run_seqs = 0  # seqs the runs' orders hold, those no longer out included

    def __len__(self) -> int:
        return len(self._entries) + len(self._sent)

    def __contains__(self, seq: int) -> bool:
        return seq in self._sent or seq in self._entries

    def among(self, seqs: list[int]) -> set[int]:
        """Those of ``seqs`` the table holds (no call per seq)."""
        taken = self._sent.keys() & seqs if self._sent else set()
        return taken | (self._entries.keys() & seqs) if self._entries else taken

    def seqs(self) -> list[int]:
        """Every seq, oldest first (for the reaper and figures, not per message)."""
        if not self._sent:
            return list(self._entries)
        return [entry.seq for entry in self.entries()]

    def entries(self) -> list[InFlight]:
        """Every entry, oldest first."""
        alone = list(self._entries.values())
        if not self._sent:
            return alone
        runs = [entry_of(seq, self._sent[seq]) for seq in self._run_order()]
        return list(merge(runs, alone, key=DEADLINE_OF))

    def _run_order(self) -> list[int]:
        """The runs' seqs still out, in the order sent."""
        return [seq for run in self._runs for seq in self._out_of(run)]

    def _out_of(self, run: RunOrder) -> list[int]:
        """The run's seqs still out (in C: those the table holds from the run)."""
        sent = self._sent
        held = list(compress(run.seqs[run.at:], map(sent.__contains__, run.seqs[run.at:])))
        deadlines = map(DEADLINE_US, map(sent.__getitem__, held))
        return list(compress(held, map(run.deadline_us.__eq__, deadlines)))

    def held_seqs(self) -> list[int]:
        """Every seq, in no order (for a minimum: none worked out)."""
        return [*self._entries, *self._sent]

    def lowest(self) -> InFlight | None:
        """The entry of the lowest seq (a walk of the table: for figures, not per message)."""
        seq = min(self.held_seqs(), default=None)
        return None if seq is None else self.get(seq)

    def get(self, seq: int) -> InFlight | None:
        held = self._sent.get(seq)
        return entry_of(seq, held) if held is not None else self._entries.get(seq)

    def get_all(self, seqs: list[int]) -> list[InFlight | None]:
        """``get`` of each seq (for the archive of an ACK's many: an InFlight each),
        a run's deliveries made into entries with no call a message but the entry's."""
        held = list(map(self._sent.get, seqs))
        if not all(held):  # (sent alone, or not held: a tuple is never false)
            return list(map(self.get, seqs))
        sents = cast(list[Sent], held)
        sent_us = list(map(SENT_US, sents))
        return list(map(InFlight, seqs, map(RECORD, sents), sent_us, map(DEADLINE_US, sents),
                        repeat(1), sent_us))

    def oldest(self) -> InFlight | None:
        front = self._front()
        return None if front is None else entry_of(*front)

    def _front(self) -> tuple[int, Held] | None:
        """The oldest entry's seq and what the table holds for it."""
        alone = next(iter(self._entries.items()), None)
        run = self._run_front() if self._sent else None
        if run is None or (alone is not None and alone[1].deadline_us < run[1][2]):
            return alone
        return run

    def _run_front(self) -> tuple[int, Sent] | None:
        """The oldest run delivery still out; the runs' orders before it let go (each
        seq looked at once, in C)."""
        runs, sent = self._runs, self._sent
        while runs:
            run = runs[0]
            seqs, deadline_us, at = run.seqs, run.deadline_us, run.at
            while (at := next(compress(count(at), map(sent.__contains__, seqs[at:])),
                              -1)) >= 0:
                held = sent[seqs[at]]
                if held[2] == deadline_us:
                    run.at = at
                    return seqs[at], held
                at += 1  # (out again, in a later run: that run's)
            runs.popleft()
            self._run_seqs -= len(seqs)
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
        while self.bytes > self.max_bytes and len(self) > 1:
            evicted.append(self._pop_first())
        return evicted

    def add_run(self, seqs: list[int], values: list[bytes], sent_us: int, deadline_us: int,
                size: int) -> None:
        """Track first deliveries sent at ``sent_us``, newer than any in the table, whose
        records are ``size`` bytes together, known to fit within max_bytes (nothing is
        evicted)."""
        self._sent.update(zip(seqs, zip(values, repeat(sent_us), repeat(deadline_us)),
                              strict=True))
        self._runs.append(RunOrder(seqs, deadline_us))
        self._run_seqs += len(seqs)
        self.bytes += size
        if self._run_seqs > 2 * len(self._sent) + COMPACT_PAST:
            self._compact()

    def _compact(self) -> None:
        """The runs' orders without the seqs no longer out (those ACKed behind one
        that is still out), so that they hold no more than what is out and a bound."""
        kept = [RunOrder(out, run.deadline_us) for run in self._runs if (out := self._out_of(run))]
        self._runs = deque(kept)
        self._run_seqs = sum(len(run.seqs) for run in kept)

    def pop(self, seq: int) -> InFlight | None:
        held = self._sent.pop(seq, None)
        entry = self._entries.pop(seq, None) if held is None else entry_of(seq, held)
        if entry is None:
            return None
        self.bytes -= len(entry.value)
        return entry

    def take_all(self, seqs: list[int]) -> Taken:
        """``pop`` of each seq, the table walked in C and no InFlight made for a run's
        delivery (a seq given twice is held once: missing the second time)."""
        found: list[Held | None] = list(map(self._sent.pop, seqs, repeat(None)))
        missing: list[int] = []
        runs_only = all(found)  # (the common ACK: a tuple is never false, and a run's)
        if not runs_only:  # sent alone, or not held
            found = [held or self._entries.pop(seq, None)
                     for seq, held in zip(seqs, found, strict=True)]
            if None in found:
                kept = [entry is not None for entry in found]
                missing = [seq for seq, entry in zip(seqs, found, strict=True) if entry is None]
                seqs, found = list(compress(seqs, kept)), list(compress(found, kept))
            runs_only = all(map(isinstance, found, repeat(tuple)))
        if runs_only:
            sents = cast(list[Sent], found)
            sizes, sent_us = list(map(len, map(RECORD, sents))), list(map(SENT_US, sents))
        else:
            entries = list(map(entry_of, seqs, cast(list[Held], found)))
            sizes = [len(entry.value) for entry in entries]
            sent_us = [entry.sent_us for entry in entries]
        self.bytes -= sum(sizes)
        return Taken(seqs, sizes, sent_us, missing)

    def expire(self, now_us: int) -> list[InFlight]:
        """Remove and return every entry whose deadline has passed."""
        expired = []
        while (oldest := self.oldest()) is not None and oldest.deadline_us <= now_us:
            expired.append(self._pop_first())
        return expired

    def _pop_first(self) -> InFlight:
        front = self._front()
        assert front is not None  # (asked only of a table that holds an entry)
        entry = self.pop(front[0])
        assert entry is not None
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self._sent.clear()
        self._runs.clear()
        self._run_seqs = 0
        self.bytes = 0
