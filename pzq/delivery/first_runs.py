"""First deliveries in runs: the messages at the start of a read that go out for the
first time, handed to an outlet in one call and tracked in one step, so that a chunk
of n messages costs a few calls plus work over the n done in C.

A run holds only what needs nothing of its own: not taken (out, waiting, leaving,
another node's), never delivered (no count to rewrite), and within the in-flight
table's bytes (nothing evicted). The first message that needs more ends the run;
it and the rest of the read go one at a time (pzq.delivery.state), as does an
expired one (while expiry is watched, the run's verdicts are asked in one pass).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate, repeat
from operator import itemgetter
from typing import NamedTuple

from pzq.delivery.inflight import InFlight
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
SEQ_OF, VALUE_OF = itemgetter(0), itemgetter(1)  # of what a read found


class Run(NamedTuple):
    seqs: list[int]
    values: list[bytes]
    sizes: list[int]  # the records' lengths added up: the first n take sizes[n - 1]


NO_RUN = Run([], [], [])


def first_run(found: list[tuple[int, bytes]], taken: set[int], delivered_before: int,
              room_bytes: int) -> Run:
    """The messages of a read, from its start, to deliver a first time in one go:
    those not ``taken`` up to the first one that was delivered before (its count
    stored, or below ``delivered_before``), as many as fit in ``room_bytes``."""
    at, never = record.BOOKKEEPING_OFFSET, record.NEVER_DELIVERED
    again = [seq for seq, value in found
             if (seq < delivered_before or not value.startswith(never, at)) and seq not in taken]
    if again:
        found = found[:_index_of(found, again[0])]
    if taken:
        found = [(seq, value) for seq, value in found if seq not in taken]
    if not found:
        return NO_RUN
    seqs, values = list(map(SEQ_OF, found)), list(map(VALUE_OF, found))
    sizes = list(accumulate(map(len, values)))
    fit = bisect_right(sizes, room_bytes)
    if fit < len(sizes):
        del seqs[fit:], values[fit:], sizes[fit:]
    return Run(seqs, values, sizes)


def unexpired(run: Run, verdict: Verdict, now_us: int) -> Run:
    """The run up to its first message expired by ``now_us`` (which goes alone, to
    expire), the verdicts asked in one pass."""
    expired = list(map(bool, map(verdict, run.seqs, run.values, repeat(now_us))))
    if True not in expired:
        return run
    end = expired.index(True)
    return Run(run.seqs[:end], run.values[:end], run.sizes[:end])


def first_deliveries(run: Run, count: int, now_us: int, deadline_us: int) -> list[InFlight]:
    """The in-flight entries of the first ``count`` of a run, sent at ``now_us``."""
    return [InFlight(seq, value, now_us, deadline_us, 1, now_us)
            for seq, value in zip(run.seqs[:count], run.values[:count], strict=True)]


def rest_of(found: list[tuple[int, bytes]], cursor: int) -> list[tuple[int, bytes]]:
    """What a read found at or past ``cursor``."""
    return found[_index_of(found, cursor):] if found and found[0][0] < cursor else found


def _index_of(found: list[tuple[int, bytes]], seq: int) -> int:
    """Where ``seq`` is, or would be, in a read (in seq order)."""
    return bisect_right(found, (seq,))
