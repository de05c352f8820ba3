"""First deliveries in runs: the messages at the start of a read that go out for the
first time, handed to an outlet in one call and tracked in one step, so that a chunk
of n messages costs a few calls plus work over the n done in C.

A run holds only what needs nothing of its own: not taken (out, waiting, leaving,
another node's), never delivered (no count to rewrite), and within the in-flight
table's bytes (nothing evicted). The first message that needs more ends the run;
it and the rest of the read go one at a time (pzq.delivery.delivering), as does an
expired one (while expiry is watched, the run's verdicts are asked in one pass).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from itertools import accumulate, compress, repeat
from operator import itemgetter
from typing import NamedTuple

from pzq.store import record

# Origin node id, seqs, records of first deliveries (their count 1) in seq order: how
# many of them, from the first, the outlet took (the rest are not sent).
RunOutlet = Callable[[bytes, list[int], list[bytes]], int]
Verdict = Callable[[int, bytes, int], int]  # seq, record, now µs: KEEP (0) or its fate


def one_by_one(node_id: bytes, seqs: list[int], values: list[bytes]) -> int:
    """An outlet that takes no run: every delivery goes one at a time."""
    return 0


ONE_BY_ONE: RunOutlet = one_by_one
# A run costs a few times one delivery's calls whatever its length: a read shorter than
# this goes one at a time (measured: about even at 8, a run of 1 costs twice as much).
RUN_AT_LEAST = 8
BOOKKEEPING_OF = itemgetter(slice(record.BOOKKEEPING_OFFSET,
                                  record.BOOKKEEPING_OFFSET + record.BOOKKEEPING.size))


class Run(NamedTuple):
    seqs: list[int]
    values: list[bytes]
    sizes: list[int]  # the records' lengths (kept by the in-flight table for their ACK)
    size: int  # added up

    def size_of(self, count: int) -> int:
        """The bytes of the first ``count`` records."""
        return self.size if count == len(self.values) else sum(self.sizes[:count])


NO_RUN = Run([], [], [], 0)


def first_run(seqs: list[int], values: list[bytes], taken: set[int], delivered_before: int,
              room_bytes: int, fresh: bool = False) -> Run:
    """The messages of a read (``seqs`` with their records ``values``; neither is
    changed), from its start, to deliver a first time in one go: those not ``taken`` up
    to the first one that was delivered before (its count stored, or below
    ``delivered_before``), as many as fit in ``room_bytes``. ``fresh``: the reader found
    no count in any record (none is looked at again)."""
    if taken:
        return _first_run_past(seqs, values, taken, delivered_before, room_bytes)
    if not seqs or seqs[0] < delivered_before:  # (seq order: the first is lowest)
        return NO_RUN
    if not fresh:  # the counts side by side: the first one set ends the run
        counts = b"".join(map(BOOKKEEPING_OF, values))
        end = (len(counts) - len(counts.lstrip(b"\0"))) // record.BOOKKEEPING.size
        if end < len(seqs):
            return _within(seqs[:end], values[:end], room_bytes)
    return _within(seqs, values, room_bytes)


def _first_run_past(seqs: list[int], values: list[bytes], taken: set[int],
                    delivered_before: int, room_bytes: int) -> Run:
    """``first_run`` of a read where some messages are taken (after a rewind, say):
    those are passed over, one look at each."""
    at, never = record.BOOKKEEPING_OFFSET, record.NEVER_DELIVERED
    again = [seq for seq, value in zip(seqs, values, strict=True)
             if (seq < delivered_before or not value.startswith(never, at)) and seq not in taken]
    end = bisect_left(seqs, again[0]) if again else len(seqs)
    kept = [seq not in taken for seq in seqs[:end]]
    return _within(list(compress(seqs, kept)), list(compress(values, kept)), room_bytes)


MEASURED_KEPT = 4  # lists of records whose lengths are kept (the groups' reads in turn)


class LastMeasured:
    """The records' lengths of the last few reads measured (MEASURED_KEPT), kept for a
    topic's other groups, which read the same list of records (pzq.store.kept_reads:
    never changed once made) and so measure it once for all; a list is known by
    identity (kept here, so its id is not reused while it is asked for). A few, not
    one: the groups' passes come in turn, and one group's read of the next run may
    come before another's of the one before (a list kept alone was measured again
    by nearly every group, at three groups)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        # (records, their lengths, added up), the newest first
        self._kept: list[tuple[list[bytes], list[int], int]] = []

    def of(self, values: list[bytes]) -> tuple[list[int], int]:
        """Each record's length (a list the caller does not change) and their sum."""
        kept = self._kept
        for measured in kept:
            if measured[0] is values:
                return measured[1], measured[2]
        sizes = list(map(len, values))
        size = sum(sizes)
        kept.insert(0, (values, sizes, size))
        del kept[MEASURED_KEPT:]
        return sizes, size


_MEASURED = LastMeasured()


def sizes_of(values: list[bytes]) -> list[int]:
    """Each record's length (the list not to be changed), measured once for the last
    list asked (as a run's ``sizes``)."""
    return _MEASURED.of(values)[0]


def _within(seqs: list[int], values: list[bytes], room_bytes: int) -> Run:
    """The run of these messages, as many as fit in ``room_bytes`` (the lists are not
    changed: they may be the read's own, kept by its chunk)."""
    sizes, size = _MEASURED.of(values)
    if size > room_bytes:  # (rare: the in-flight table nearly full)
        added = list(accumulate(sizes))
        fit = bisect_right(added, room_bytes)
        seqs, values, sizes = seqs[:fit], values[:fit], sizes[:fit]
        size = added[fit - 1] if fit else 0
    return Run(seqs, values, sizes, size) if seqs else NO_RUN


def unexpired(run: Run, verdict: Verdict, now_us: int) -> Run:
    """The run up to its first message expired by ``now_us`` (which goes alone, to
    expire), the verdicts asked in one pass."""
    expired = list(map(bool, map(verdict, run.seqs, run.values, repeat(now_us))))
    if True not in expired:
        return run
    end = expired.index(True)
    return Run(run.seqs[:end], run.values[:end], run.sizes[:end], run.size_of(end))


def rest_at(seqs: list[int], cursor: int) -> int:
    """Where what a read found at or past ``cursor`` starts (in seq order)."""
    return bisect_left(seqs, cursor) if seqs and seqs[0] < cursor else 0
