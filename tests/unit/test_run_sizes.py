"""A read's records measured once for a topic's groups (``first_runs.LastMeasured``):
the groups that read the same list of records take the first one's sizes; another
list, or a part of it, is measured again."""

from __future__ import annotations

import pytest

from pzq.delivery import first_runs
from pzq.delivery.recent import longest
from tests.support.measured import Measured

pytestmark = pytest.mark.timeout(30)


def test_the_groups_reading_one_list_of_records_measure_it_once():
    seqs = list(range(100, 110))
    values: list[bytes] = [Measured(b"r" * (20 + n)) for n in range(10)]
    Measured.asked = 0
    runs = [first_runs.first_run(seqs, values, set(), 0, 1 << 30, True) for _ in range(3)]
    assert Measured.asked == 10  # (once a record: not once a group)
    assert all(run.sizes == [20 + n for n in range(10)] and run.size == sum(run.sizes)
               for run in runs)
    other = list(values)  # another read of the same records: measured again
    assert first_runs.first_run(seqs, other, set(), 0, 1 << 30, True).size == runs[0].size
    assert Measured.asked == 20
    part = first_runs.first_run(seqs, values, set(), 0, 100, True)  # room for four
    assert part.seqs == seqs[:4] and part.sizes == [20, 21, 22, 23] and part.size == 86


class Stored(Measured):
    """A record whose truth is not its length (so that only measuring it counts)."""

    def __bool__(self) -> bool:
        return True


def test_a_read_kept_for_the_other_groups_is_measured_once_with_its_runs():
    """``longest``, for the bound on what is kept for the other groups, measures the
    records as first_run does, for it: the first group's read is measured once, not
    once to keep it and again for its run."""
    seqs = list(range(200, 210))
    values: list[bytes] = [Stored(b"r" * (30 + n)) for n in range(10)]
    Measured.asked = 0
    assert longest(values) == 39
    runs = [first_runs.first_run(seqs, values, set(), 0, 1 << 30, True) for _ in range(3)]
    assert Measured.asked == 10  # (twice a record before)
    assert all(run.sizes == [30 + n for n in range(10)] for run in runs)
    gaps: list[bytes | None] = [Stored(b"g" * 40), None, Stored(b"g" * 41)]
    assert longest(gaps) == 41 and longest([None, None]) == 0 and longest([]) == 0


def test_groups_reading_two_runs_in_turn_measure_each_once():
    """One group's read of the next run may come before another's of the run before:
    the lists read in turn are each measured once (a list kept alone was measured again
    at each turn); past MEASURED_KEPT others, a list is measured again."""
    first: list[bytes] = [Measured(b"a" * (10 + n)) for n in range(5)]
    second: list[bytes] = [Measured(b"b" * (20 + n)) for n in range(5)]
    seqs = list(range(300, 305))
    Measured.asked = 0
    for _ in range(3):
        for values in (first, second):
            first_runs.first_run(seqs, values, set(), 0, 1 << 30, True)
    assert Measured.asked == 10
    for _ in range(first_runs.MEASURED_KEPT):
        first_runs.first_run(seqs, [b"c"] * 5, set(), 0, 1 << 30, True)
    assert first_runs.first_run(seqs, first, set(), 0, 1 << 30, True).size == 60
    assert Measured.asked == 15
