"""Deliveries awaiting a consumer ACK, bounded in bytes, oldest first.

Every delivery gets the same ack timeout, so send order is deadline order: the
reaper takes expired entries from the front, and the LRU bound evicts the least
recently sent from the front too.

A run of first deliveries (pzq.delivery.first_runs) is held as one entry: its seqs
and records as sent (the lists themselves, a record let go once its delivery is out
no more), when it was sent and its deadline, and a flag a delivery of whether it is
still out (a bytearray). An ACK that names a
stretch of a run's seqs in the order sent (a consumer's ``ack_many`` of what it read)
takes that stretch in a few steps whatever its length: one list compare and a slice
of flags cleared, in C, where an entry a message cost a dict insert and pop and a
tuple. Anything asked of one seq (a NACK, a WORKING, an expiry, an eviction, a look)
finds its run by bisection (the runs held are kept apart: each run's seqs ascending,
and no run's span crosses another's; a run that would is held as deliveries sent
alone) and clears its one flag. Anything else (a delivery sent alone: given back, a
lane's, extended) is an InFlight in an insertion-ordered table. The oldest entry is
the older of the two fronts (a run's first on equal deadlines: sent in the same
wake, the one sent alone is never older). Everything outside sees an InFlight, made
when it is asked for (a delivery given back, expired, evicted, looked at).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass
from heapq import merge
from itertools import compress, repeat
from operator import attrgetter
from typing import NamedTuple

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


DEADLINE_OF = attrgetter("deadline_us")  # of an InFlight
NONE_EVICTED: list[InFlight] = []  # (never changed: no list made per delivery)
OUT, GONE = 1, 0  # a run delivery's flag
NO_SEQS: list[int] = []  # a run let go holds nothing (never changed)
NO_RECORDS: list[bytes] = []
LET_GO = b""  # a run's record once its delivery is out no more (a record is never empty)


class Taken(NamedTuple):
    """Deliveries an ACK took from the table: their seqs, their records' sizes and when
    each was sent, in the order asked; the seqs the table did not hold; and whether
    the seqs are ascending, each once (taken as stretches of runs, in their order)."""

    seqs: list[int]
    sizes: list[int]
    sent_us: list[int]
    missing: list[int]
    ascending: bool = False


@dataclass(slots=True, eq=False)
class Run:
    """First deliveries sent together: their seqs (ascending) and records as sent, and
    which are still out (a flag each); ``out`` counts them (0: let go). ``sizes``: the
    records' lengths, as the read found them (an ACK's are sliced, not measured)."""

    seqs: list[int]
    values: list[bytes]
    sent_us: int
    deadline_us: int
    flags: bytearray
    out: int
    sizes: list[int]
    size: int  # the sizes added up

    def entry(self, at: int) -> InFlight:
        """Its delivery at ``at`` as an InFlight (a first delivery: its count is 1)."""
        return InFlight(self.seqs[at], self.values[at], self.sent_us, self.deadline_us, 1,
                        self.sent_us)

    def entries(self) -> list[InFlight]:
        """Its deliveries still out, as InFlights, in the order sent."""
        sent_us, count = self.sent_us, self.out
        return list(map(InFlight, compress(self.seqs, self.flags),
                        compress(self.values, self.flags), repeat(sent_us, count),
                        repeat(self.deadline_us, count), repeat(1, count),
                        repeat(sent_us, count)))


LET_GO_KEPT = 64  # runs let go behind one still out, kept in the send order at most


class InFlightTable(SeqTable[InFlight]):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()  # the deliveries sent alone, in the order sent
        self.max_bytes = max_bytes
        self.bytes = 0
        self._runs: deque[Run] = deque()  # in the order sent (those let go among them)
        self._by_first: dict[int, Run] = {}  # the runs with a delivery out, by first seq
        self._firsts: list[int] = []  # their first seqs, ascending
        self._run_out = 0  # run deliveries out
        self._let_go = 0  # runs let go, still in the send order behind one out

    def __len__(self) -> int:
        return len(self._entries) + self._run_out

    def __contains__(self, seq: int) -> bool:
        return seq in self._entries or (self._run_out > 0 and self._find(seq) is not None)

    def _find(self, seq: int) -> tuple[Run, int] | None:
        """The run delivery of ``seq`` still out, and where in its run (None: none)."""
        firsts = self._firsts
        at = bisect_right(firsts, seq) - 1
        if at < 0:
            return None
        run = self._by_first[firsts[at]]
        seqs = run.seqs
        if seq > seqs[-1]:
            return None
        at = bisect_left(seqs, seq)
        return (run, at) if seqs[at] == seq and run.flags[at] else None

    def _runs_across(self, low: int, high: int) -> list[Run]:
        """The runs held whose spans meet ``low`` to ``high``."""
        firsts, by_first = self._firsts, self._by_first
        found = []
        at = bisect_right(firsts, high) - 1
        while at >= 0 and (run := by_first[firsts[at]]).seqs[-1] >= low:
            found.append(run)
            at -= 1
        return found

    def among(self, seqs: list[int]) -> set[int]:
        """Those of ``seqs`` the table holds (no call per seq)."""
        entries = self._entries
        taken = entries.keys() & seqs if entries else set()
        if self._run_out and seqs:
            ordered = sorted(seqs)  # (ints compared in C: see pzq.bulk.low_high)
            for run in self._runs_across(ordered[0], ordered[-1]):
                taken.update(set(compress(run.seqs, run.flags)).intersection(seqs))
        return taken

    def seqs(self) -> list[int]:
        """Every seq, oldest first (for the reaper and figures, not per message)."""
        if not self._run_out:
            return list(self._entries)
        return [entry.seq for entry in self.entries()]

    def entries(self) -> list[InFlight]:
        """Every entry, oldest first."""
        alone = list(self._entries.values())
        if not self._run_out:
            return alone
        runs = [entry for run in self._runs if run.out for entry in run.entries()]
        return list(merge(runs, alone, key=DEADLINE_OF))

    def held_seqs(self) -> list[int]:
        """The seqs held, a run's by its lowest still out (for a minimum: none worked
        out), in no order."""
        return [*self._entries,
                *(run.seqs[run.flags.index(OUT)] for run in self._by_first.values())]

    def lowest(self) -> InFlight | None:
        """The entry of the lowest seq (a walk of the table: for figures, not per message)."""
        seq = min(self.held_seqs(), default=None)
        return None if seq is None else self.get(seq)

    def get(self, seq: int) -> InFlight | None:
        entry = self._entries.get(seq)
        if entry is None and self._run_out:
            found = self._find(seq)
            if found is not None:
                return found[0].entry(found[1])
        return entry

    def get_all(self, seqs: list[int]) -> list[InFlight | None]:
        """``get`` of each seq (for the archive of an ACK's many: an InFlight each), a
        stretch of a run's deliveries made into entries with no call a message but the
        entry's."""
        stretch = self._stretch(seqs) if self._run_out and seqs else None
        if stretch is None or stretch[2] < len(seqs):
            return list(map(self.get, seqs))
        run, at, count = stretch
        sent_us = run.sent_us
        return list(map(InFlight, seqs, run.values[at:at + count], repeat(sent_us, count),
                        repeat(run.deadline_us, count), repeat(1, count),
                        repeat(sent_us, count)))

    def _stretch(self, seqs: list[int], start: int = 0) -> tuple[Run, int, int] | None:
        """The run whose deliveries out, from one on, are ``seqs`` from ``start`` on as
        far as the run goes: the run, where in it, and how many (None: none such)."""
        found = self._find(seqs[start])
        if found is None:
            return None
        run, at = found
        count = min(len(run.seqs) - at, len(seqs) - start)
        end = at + count
        # (the flags first: a find in C; then the seqs, one compare a pair)
        if run.flags.find(GONE, at, end) >= 0 or run.seqs[at:end] != seqs[start:start + count]:
            return None
        return run, at, count

    def oldest(self) -> InFlight | None:
        alone = next(iter(self._entries.values()), None)
        run = self._front_run() if self._run_out else None
        if run is None or (alone is not None and alone.deadline_us < run.deadline_us):
            return alone
        return run.entry(run.flags.index(OUT))

    def _front_run(self) -> Run | None:
        """The oldest run with a delivery out; the runs let go before it leave the order."""
        runs = self._runs
        while runs and not runs[0].out:
            runs.popleft()
            self._let_go -= 1
        return runs[0] if runs else None

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
                size: int, sizes: list[int] | None = None) -> None:
        """Track first deliveries sent at ``sent_us``, newer than any in the table, whose
        records are ``size`` bytes together (``sizes``: each one's, when measured
        already), known to fit within max_bytes (nothing is evicted). ``seqs``
        ascending, as a read finds them; the lists are kept (not to be changed by the
        caller), and the table lets each record go once its delivery is out no more."""
        if not seqs:
            return
        first, last = seqs[0], seqs[-1]
        firsts, by_first = self._firsts, self._by_first
        self.bytes += size
        if first <= last and (not firsts or by_first[firsts[-1]].seqs[-1] < first):
            firsts.append(first)  # (past every run held: the common case)
        elif first > last or self._runs_across(first, last):
            # its span crosses a run's held (a rewind's): its deliveries are held alone
            self._entries.update(zip(seqs, map(
                InFlight, seqs, values, repeat(sent_us), repeat(deadline_us), repeat(1),
                repeat(sent_us)), strict=True))
            return
        else:
            firsts.insert(bisect_left(firsts, first), first)
        count = len(seqs)
        run = Run(seqs, values, sent_us, deadline_us, bytearray(b"\1") * count, count,
                  list(map(len, values)) if sizes is None else sizes, size)
        by_first[first] = run
        self._runs.append(run)
        self._run_out += count

    def pop(self, seq: int) -> InFlight | None:
        entry = self._entries.pop(seq, None)
        if entry is None:
            found = self._find(seq) if self._run_out else None
            if found is None:
                return None
            run, at = found
            entry = run.entry(at)
            self._clear(run, at, 1)
        self.bytes -= len(entry.value)
        return entry

    def _clear(self, run: Run, at: int, count: int) -> None:
        """``count`` deliveries of the run from ``at`` on are out no more (each was)."""
        run.flags[at:at + count] = bytes(count)
        run.out -= count
        self._run_out -= count
        if run.out:  # its records let go: memory holds those still out, as counted
            run.values[at:at + count] = repeat(LET_GO, count)
            return
        del self._by_first[run.seqs[0]]
        firsts = self._firsts
        del firsts[bisect_left(firsts, run.seqs[0])]
        run.seqs, run.values, run.sizes = NO_SEQS, NO_RECORDS, NO_SEQS
        self._let_go += 1
        if self._let_go > LET_GO_KEPT and self._let_go > len(self._by_first):
            self._runs = deque(run for run in self._runs if run.out)
            self._let_go = 0

    def take_all(self, seqs: list[int]) -> Taken:
        """``pop`` of each seq (a seq given twice is held once: missing the second
        time): the stretches of runs named in the order sent, in a few steps each. The
        seqs taken are the run's own int objects where a stretch was taken (equal to
        those asked), so that the tables keyed by them later find each by identity, not
        by a compare of two ints (an ACK's ints are never the objects the read made)."""
        if self._run_out and seqs:  # the common ACK: of one BATCH that was a whole run
            whole = self._whole_run(seqs)
            if whole is not None:
                return whole
        taken = 0
        taken_seqs: list[int] = []
        sizes: list[int] = []
        sent_us: list[int] = []
        ascending = True  # (each stretch is: a run's seqs are a read's)
        while self._run_out and taken < len(seqs):
            stretch = self._stretch(seqs, taken)
            if stretch is None:
                break
            run, at, count = stretch
            if taken and run.seqs[at] <= taken_seqs[-1]:
                ascending = False
            taken_seqs += run.seqs[at:at + count]
            sizes += run.sizes[at:at + count]
            sent_us += repeat(run.sent_us, count)
            # (a whole run's bytes are known: its sizes are not added up again)
            self.bytes -= run.size if count == len(run.seqs) else sum(run.sizes[at:at + count])
            self._clear(run, at, count)
            taken += count
        if taken == len(seqs):
            return Taken(taken_seqs, sizes, sent_us, [], ascending)
        # the rest one by one: sent alone, not held, or not in a run's order
        missing: list[int] = []
        for seq in seqs[taken:]:
            entry = self.pop(seq)
            if entry is None:
                missing.append(seq)
            else:
                taken_seqs.append(seq)
                sizes.append(len(entry.value))
                sent_us.append(entry.sent_us)
        return Taken(taken_seqs, sizes, sent_us, missing)

    def _whole_run(self, seqs: list[int]) -> Taken | None:
        """``take_all`` of exactly a run held whole, every delivery of it out, named in
        its order: its own lists taken as they are, where the stretches' way slices
        them and adds them to lists of its own (None: not that case, nothing done)."""
        run = self._by_first.get(seqs[0])
        count = len(seqs)
        if run is None or run.out != count or len(run.seqs) != count \
                or (run.seqs is not seqs and run.seqs != seqs):
            return None
        taken = Taken(run.seqs, run.sizes, [run.sent_us] * count, [], True)
        self.bytes -= run.size
        self._clear(run, 0, count)
        return taken

    def expire(self, now_us: int) -> list[InFlight]:
        """Remove and return every entry whose deadline has passed."""
        expired = []
        while (oldest := self.oldest()) is not None and oldest.deadline_us <= now_us:
            expired.append(self._pop_first())
        return expired

    def _pop_first(self) -> InFlight:
        oldest = self.oldest()
        assert oldest is not None  # (asked only of a table that holds an entry)
        entry = self.pop(oldest.seq)
        assert entry is not None
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self._runs.clear()
        self._by_first.clear()
        self._firsts.clear()
        self._run_out = 0
        self._let_go = 0
        self.bytes = 0
