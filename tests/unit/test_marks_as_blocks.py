"""A group's marks kept in memory as blocks of bits (pzq.store.group_marks), against a
set of seqs a group: random marks and unmarks over a few blocks, in batches written or
failed, each question (``is_done``, ``done_among``, ``done_by_all`` with and without
the seqs' masks made already) answered as the sets answer, the counts kept right as
groups go past MARKS_KEPT and back, and the store holding what the sets hold."""

from __future__ import annotations

import random

import pytest

from pzq.delivery.kept_tags import KeptTags
from pzq.store import group_marks
from pzq.store.group_marks import GroupMarks, block_masks
from pzq.store.keyspace import MARK_BLOCK
from pzq.store.store import Store

pytestmark = pytest.mark.timeout(120)

GROUPS = (1, 2, 3)
SPAN = 4 * MARK_BLOCK
EVERY_KEPT = group_marks.MARKS_KEPT  # (far more than a test makes)


def some_seqs(rng: random.Random) -> list[int]:
    """An ACK's seqs: a run, a scatter, one alone, some twice, in any order."""
    shape = rng.random()
    if shape < 0.4:
        start = rng.randrange(SPAN)
        seqs = list(range(start, min(SPAN, start + rng.choice((2, 100, 700)))))
    elif shape < 0.8:
        seqs = rng.sample(range(SPAN), rng.choice((2, 30, 100, 400)))
    else:
        seqs = [rng.randrange(SPAN)]
    if rng.random() < 0.2:
        seqs += rng.choices(seqs, k=3)
    if rng.random() < 0.3:
        rng.shuffle(seqs)
    return seqs


def check_answers(marks: GroupMarks, has: dict[int, set[int]], rng: random.Random) -> None:
    seqs = some_seqs(rng)
    ascending = sorted(set(seqs))  # (a read's: a run, or a scatter)
    for group_id in GROUPS:
        assert marks.done_among(group_id, seqs) == has[group_id].intersection(seqs)
        assert marks.done_among(group_id, ascending, ascending=True) \
            == has[group_id].intersection(seqs)
        probe = rng.choice(seqs)
        assert marks.is_done(group_id, probe) is (probe in has[group_id])
    groups = rng.sample(GROUPS, rng.randrange(len(GROUPS) + 1))
    expected = [all(seq in has[group_id] for group_id in groups) for seq in seqs]
    assert marks.done_by_all(groups, seqs) == expected
    assert marks.done_by_all(groups, seqs, block_masks(seqs)) == expected


@pytest.mark.parametrize("kept", [EVERY_KEPT, 300])
def test_marks_as_blocks_answer_as_sets_of_seqs(tmp_path, monkeypatch, kept):
    monkeypatch.setattr(group_marks, "MARKS_KEPT", kept)  # 300: groups go past and back
    rng = random.Random(kept)
    store = Store.open(tmp_path / "db")
    marks = GroupMarks(store)
    has: dict[int, set[int]] = {group_id: set() for group_id in GROUPS}
    past = 0
    for round_ in range(300):
        batch = store.begin()
        changed = {group_id: set(seqs) for group_id, seqs in has.items()}
        for _ in range(rng.randrange(1, 4)):
            seqs = some_seqs(rng)
            masks = block_masks(seqs) if rng.random() < 0.5 else None
            move = rng.random()
            if move < 0.5:
                group_id = rng.choice(GROUPS)
                marks.mark_all(batch, group_id, seqs, masks)
                changed[group_id].update(seqs)
            elif move < 0.6:
                group_id = rng.choice(GROUPS)
                marks.unmark_all(batch, group_id, seqs)
                changed[group_id].difference_update(seqs)
            else:
                groups = rng.sample(GROUPS, rng.randrange(1, len(GROUPS) + 1))
                marks.unmark_groups(batch, groups, seqs, masks)
                for group_id in groups:
                    changed[group_id].difference_update(seqs)
            check_answers(marks, changed, rng)  # (as with the batch, before its write)
        if rng.random() < 0.1:  # a failed write: nothing of it stored, read again
            marks.failed()
        else:
            store.commit(batch)
            marks.written()
            has = changed
        check_answers(marks, has, rng)  # (every group asked: read, or not kept)
        in_memory = marks.kept()
        past += in_memory < sum(map(len, has.values()))
        if kept == EVERY_KEPT:
            assert in_memory == sum(map(len, has.values()))
        if round_ % 50 == 49:  # what the store holds is what the sets hold
            again = GroupMarks(store)
            for group_id in GROUPS:
                assert again.done_among(group_id, list(range(SPAN))) == has[group_id]
    assert bool(past) is (kept == 300)  # some group asked in the store, not in memory
    store.close()


def test_counts_kept_as_bits_are_set_and_cleared(tmp_path):
    store = Store.open(tmp_path / "db")
    marks = GroupMarks(store)
    batch = store.begin()
    marks.mark_all(batch, 1, list(range(10, 110)))
    marks.mark_all(batch, 1, list(range(50, 150)) + [50, 60])  # 40 new, some twice
    marks.unmark_groups(batch, [1, 2], [5, 10, 11, 12, 3000])  # 3 of them marked
    store.commit(batch)
    marks.written()
    assert marks.kept() == 140 - 3
    assert marks.done_among(2, list(range(200))) == set()
    store.close()


def test_a_read_across_a_restore_s_skip_of_seqs_is_answered(tmp_path):
    """A restored node's group reads its messages from before and after the 2**48
    seqs it skipped in one chunk: one int over that span would not fit in memory (the
    node failed with MemoryError)."""
    store = Store.open(tmp_path / "db")
    marks = GroupMarks(store)
    after = 1 << 48
    batch = store.begin()
    marks.mark_all(batch, 1, [7, after + 3])
    store.commit(batch)
    marks.written()
    seqs = [5, 6, 7, after + 2, after + 3]
    assert marks.done_among(1, seqs, ascending=True) == {7, after + 3}
    assert marks.done_among(2, seqs, ascending=True) == set()
    store.close()


def test_pop_all_gives_the_masks_it_made(tmp_path):
    tags = KeptTags()
    seqs = list(range(1000, 1100))
    tags.keep_all(seqs, [b"t"] * len(seqs))
    found, every, masks = tags.pop_all_masked(seqs[::-1])
    assert found == [b"t"] * 100 and every
    assert masks == block_masks(seqs)
    across = list(range(1000, 1100, 3)) + list(range(2000, 2100))  # ascending, two blocks
    tags.keep_all(across, [b"t"] * len(across))
    found, every, masks = tags.pop_all_masked(across, ascending=True)
    assert found == [b"t"] * len(across) and every and masks == block_masks(across)
    tags.keep_all(seqs, [b"t"] * 50 + [b"u"] * 50)  # one by one: no masks made
    assert tags.pop_all_masked(seqs)[2] is None


def test_the_lowest_seq_of_masks_is_the_lowest_seq(tmp_path):
    rng = random.Random(3)
    for _ in range(300):
        seqs = some_seqs(rng)
        assert group_marks.lowest_masked(block_masks(seqs)) == min(seqs)
