"""A group's marks asked and changed in bulk, as the last group's ACK of a topic's
messages does: ``done_by_all`` (the seqs every other group is done with, by
intersections of their kept marks) and ``unmark_groups`` (the same seqs unmarked for
several groups, the blocks' masks made once) against the simple forms, a seq and a
group at a time, with random marks, repeated seqs, and groups whose marks are too
many to keep (asked in their blocks)."""

from __future__ import annotations

import random

import pytest

from pzq.store import group_marks
from pzq.store.group_marks import GroupMarks
from pzq.store.keyspace import MARK_BLOCK
from pzq.store.store import Store

pytestmark = pytest.mark.timeout(60)

GROUPS = (1, 2, 3, 4)


def marked(store: Store, marks: GroupMarks, rng: random.Random) -> dict[int, set[int]]:
    """Random marks of each group, over three blocks, stored; what each has."""
    has: dict[int, set[int]] = {}
    span = range(5, 3 * MARK_BLOCK)
    for group_id in GROUPS:
        seqs = rng.sample(span, rng.choice((0, 3, 40, 300, 900)))
        batch = store.begin()
        marks.mark_all(batch, group_id, seqs)
        store.commit(batch)
        has[group_id] = set(seqs)
    return has


def asked(rng: random.Random, has: dict[int, set[int]]) -> list[int]:
    """An ACK's seqs: a run, some marked by all, some by none, some twice."""
    every = set.intersection(*has.values())
    pool = sorted(every | set(rng.sample(range(3 * MARK_BLOCK + 10), 200)))
    start = rng.randrange(len(pool))
    seqs = pool[start:start + rng.choice((1, 2, 50, 100, 300))]
    if seqs and rng.random() < 0.3:
        seqs += rng.choices(seqs, k=3)  # some twice
    if rng.random() < 0.3:
        rng.shuffle(seqs)
    return seqs


@pytest.mark.parametrize("kept", [group_marks.MARKS_KEPT, 200])
def test_done_by_all_answers_as_each_group_asked_alone(tmp_path, monkeypatch, kept):
    monkeypatch.setattr(group_marks, "MARKS_KEPT", kept)  # 200: some groups not kept
    rng = random.Random(41)
    for round_ in range(40):
        store = Store.open(tmp_path / f"db{round_}")
        marks = GroupMarks(store)
        has = marked(store, marks, rng)
        for _ in range(10):
            seqs = asked(rng, has)
            groups = rng.sample(GROUPS, rng.randrange(len(GROUPS) + 1))
            expected = [all(seq in has[group_id] for group_id in groups) for seq in seqs]
            assert marks.done_by_all(groups, seqs) == expected
            assert marks.done_by_all(groups, seqs) == [
                all(marks.is_done(group_id, seq) for group_id in groups) for seq in seqs]
        store.close()


@pytest.mark.parametrize("kept", [group_marks.MARKS_KEPT, 200])
def test_unmark_groups_is_unmark_all_of_each(tmp_path, monkeypatch, kept):
    monkeypatch.setattr(group_marks, "MARKS_KEPT", kept)
    rng = random.Random(7)
    for round_ in range(20):
        stores = [Store.open(tmp_path / f"db{round_}-{form}") for form in ("bulk", "each")]
        forms = [GroupMarks(store) for store in stores]
        seed = rng.random()
        has = {}
        for store, marks in zip(stores, forms, strict=True):
            has = marked(store, marks, random.Random(seed))  # the same in both
        for _ in range(5):
            seqs = asked(rng, has)
            groups = rng.sample(GROUPS, rng.randrange(1, len(GROUPS) + 1))
            bulk, each = zip(stores, forms, strict=True)
            batch = bulk[0].begin()
            bulk[1].unmark_groups(batch, groups, seqs)
            bulk[0].commit(batch)
            batch = each[0].begin()
            for group_id in groups:
                each[1].unmark_all(batch, group_id, seqs)
            each[0].commit(batch)
            for group_id in groups:
                has[group_id] -= set(seqs)
            for group_id in GROUPS:
                probe = range(3 * MARK_BLOCK + 10)
                assert bulk[1].done_among(group_id, list(probe)) == has[group_id]
                assert each[1].done_among(group_id, list(probe)) == has[group_id]
        for store in stores:
            store.close()
        reopened = [GroupMarks(Store.open(tmp_path / f"db{round_}-{form}"))
                    for form in ("bulk", "each")]
        for group_id in GROUPS:
            assert reopened[0].done_among(group_id, list(range(3 * MARK_BLOCK + 10))) \
                == reopened[1].done_among(group_id, list(range(3 * MARK_BLOCK + 10))) \
                == has[group_id]
        for marks in reopened:
            marks.store.close()
