"""What kept reads made, taken for another read of the same messages by their runs
(``KeptReads.run_from``): a look at each kept read, not at each seq, as far as the
runs reach with no seq missing; reads that are not runs, or not the asker's, give
nothing."""

from __future__ import annotations

import random

import pytest

from pzq.store.kept_reads import KEPT_RECORD_BYTES, KeptReads
from tests.support.measured import Measured

pytestmark = pytest.mark.timeout(30)


def made_of(read: tuple[str, list[str]]) -> list[str] | None:
    return read[1] if read[0] == "own" else None


def kept(*reads: tuple[list[int], str]) -> KeptReads[tuple[str, list[str]]]:
    runs: KeptReads[tuple[str, list[str]]] = KeptReads()
    for seqs, origin in reads:
        runs.keep(seqs, [], (origin, [f"e{seq}" for seq in seqs]))
    return runs


def test_a_read_takes_what_runs_made_as_far_as_they_reach():
    runs = kept((list(range(10, 20)), "own"), (list(range(20, 25)), "own"))
    assert runs.run_from(12, 20, made_of) == [f"e{seq}" for seq in range(12, 25)]
    assert runs.run_from(15, 3, made_of) == ["e15", "e16", "e17"]
    assert runs.run_from(9, 5, made_of) == []  # (its first is kept nowhere)
    assert runs.run_from(30, 5, made_of) == []


class LookedAt(list[int]):
    """A kept read's seqs that count how often they are looked into."""

    looks = 0

    def __getitem__(self, at):
        LookedAt.looks += 1
        return super().__getitem__(at)


def test_a_read_of_new_messages_looks_at_no_kept_read_and_a_shared_one_at_the_newest():
    """The first group's read of new messages (past every kept read) is told at once;
    another group's read of what was kept last finds it first (the kept reads are
    looked at newest first): a look at each of the 20 kept reads before."""
    runs: KeptReads[tuple[str, list[str]]] = KeptReads()
    for first in range(0, 2000, 100):
        seqs = LookedAt(range(first, first + 100))
        runs.keep(seqs, [], ("own", [f"e{seq}" for seq in seqs]))
    LookedAt.looks = 0
    assert runs.run_from(2000, 100, made_of) == []
    assert LookedAt.looks == 0
    assert runs.run_from(1950, 50, made_of) == [f"e{seq}" for seq in range(1950, 2000)]
    assert LookedAt.looks <= 8  # (the newest read only: some 44 looks before)
    LookedAt.looks = 0
    assert runs.run_from(50, 100, made_of) == [f"e{seq}" for seq in range(50, 150)]


def test_reads_with_gaps_and_other_origins_give_nothing():
    runs = kept(([10, 11, 13, 14], "own"), (list(range(20, 30)), "other"))
    assert runs.run_from(10, 2, made_of) == []
    assert runs.run_from(20, 5, made_of) == []


def test_random_runs_give_each_seqs_own_entry():
    rng = random.Random(41)
    for _ in range(300):
        reads = []
        for _ in range(rng.randrange(1, 6)):
            first = rng.randrange(100)
            seqs = list(range(first, first + rng.randrange(1, 30)))
            if rng.random() < 0.2:
                del seqs[rng.randrange(len(seqs))]  # (not a run)
            reads.append((seqs, "own" if rng.random() < 0.8 else "other"))
        runs = kept(*reads)
        first, count = rng.randrange(110), rng.randrange(1, 40)
        found = runs.run_from(first, count, made_of)
        covered = {seq for seqs, origin in reads if origin == "own" and seqs
                   and seqs[-1] - seqs[0] == len(seqs) - 1 for seq in seqs}
        reach = first
        while reach < first + count and reach in covered:
            reach += 1
        assert found == [f"e{seq}" for seq in range(first, reach)]


def test_each_of_random_seqs_is_what_a_kept_read_made_of_it_or_none():
    """``each_of``: for a read that is not a kept list (one starting mid-run, a filtered
    group's some seqs), each seq's entry from whichever kept read holds it (runs and
    reads with gaps, overlapping), None where none does."""
    rng = random.Random(42)
    for _ in range(500):
        reads = []
        for _ in range(rng.randrange(0, 6)):
            first = rng.randrange(100)
            seqs = list(range(first, first + rng.randrange(1, 30)))
            if rng.random() < 0.3:
                seqs = sorted(rng.sample(seqs, max(1, len(seqs) // 2)))  # (not a run)
            reads.append((seqs, "own"))
        runs = kept(*reads)
        first = rng.randrange(120)
        asked = list(range(first, first + rng.randrange(1, 40)))
        if rng.random() < 0.5:
            asked = sorted(rng.sample(asked, max(1, len(asked) // 3)))
        held = {seq for seqs, _ in reads for seq in seqs}
        assert runs.each_of(asked, lambda read: read[1]) == [
            f"e{seq}" if seq in held else None for seq in asked]


def test_a_read_measured_already_is_not_measured_again_and_a_long_one_is_not_kept():
    runs: KeptReads[str] = KeptReads()
    records: list[bytes | None] = [Measured(b"r" * 10) for _ in range(5)]
    Measured.asked = 0
    seqs = list(range(5))
    runs.keep(seqs, records, "made", 10)  # (its caller measured the records)
    assert Measured.asked == 0 and runs.get(seqs) == "made"
    long_seqs = list(range(5, 10))
    runs.keep(long_seqs, [b"r"] * 5, "long", KEPT_RECORD_BYTES + 1)
    assert runs.get(long_seqs) is None
    unmeasured = list(range(10, 12))
    runs.keep(unmeasured, [b"r" * (KEPT_RECORD_BYTES + 1), None], "long")
    assert runs.get(unmeasured) is None
