"""A group's kept tags (pzq.delivery.kept_tags) answer as a dict of seq -> tag would:
reads of one tag kept as bits of blocks, others one by one, taken back one at a time
or many at once (an ACK's, in any order, a seq given twice, some never kept)."""

from __future__ import annotations

import random
from itertools import repeat

import pytest

from pzq.delivery.kept_tags import KeptTags
from pzq.store.group_marks import block_masks
from pzq.store.keyspace import MARK_BLOCK

TAGS = [b"", b"eu", b"us"]


def tag_of(seq: int) -> bytes:
    """A message's tag (never another): stretches of one tag, so that most reads find
    one and some two or three."""
    return TAGS[seq // 300 % 3 if seq < 3 * MARK_BLOCK else seq % 3]


def _read(rng: random.Random) -> tuple[list[int], list[bytes]]:
    """Ascending seqs, each once (a run, or with gaps, within a block or across
    blocks), with their tags (one object each value, or objects of equal values)."""
    first = rng.randrange(4 * MARK_BLOCK)
    seqs = list(range(first, first + rng.choice([1, 5, 100, 2 * MARK_BLOCK + 7])))
    if rng.random() < 0.3:
        seqs = sorted(rng.sample(seqs, max(1, len(seqs) // rng.choice([2, 50]))))
    found = list(map(tag_of, seqs))
    if rng.random() < 0.3:
        found = [bytes(bytearray(tag)) for tag in found]
    return seqs, found


@pytest.mark.parametrize("seed", range(12))
def test_kept_tags_answer_as_a_dict_of_each_would(seed):
    rng = random.Random(seed)
    kept, model = KeptTags(), {}
    for _ in range(400):
        step = rng.random()
        if step < 0.3:
            seqs, found = _read(rng)
            kept.keep_all(seqs, found)
            model.update(zip(seqs, found, strict=True))
        elif step < 0.35:
            seq = rng.randrange(5 * MARK_BLOCK)
            kept.keep(seq, tag_of(seq))
            model[seq] = tag_of(seq)
        elif step < 0.65:  # an ACK's: mostly what was read, in any order, a seq twice
            known = list(model)
            seqs = rng.sample(known, min(len(known), rng.choice([1, 3, 100])))
            if rng.random() < 0.3:
                seqs.sort()
            if seqs and rng.random() < 0.2:
                seqs.append(seqs[0])
            if rng.random() < 0.2:
                seqs.append(rng.randrange(5 * MARK_BLOCK))
            ascending = rng.random() < 0.5 and seqs == sorted(set(seqs))
            expected = list(map(model.pop, seqs, repeat(None)))
            if ascending:  # (the ACK of a read's run, in its order: each once)
                tags, every, masks = kept.pop_all_masked(seqs, ascending=True)
                assert (tags, every) == (expected, None not in expected)
                assert masks is None or masks == block_masks(seqs)
            else:
                assert kept.pop_all(seqs) == (expected, None not in expected)
        elif step < 0.8:
            seqs = rng.sample(range(5 * MARK_BLOCK), 50) + list(model)[:50]
            expected = list(map(model.get, seqs))
            assert kept.get_all(seqs) == (expected, None not in expected)
            assert kept.get_all(list(model)[:100]) == ([*model.values()][:100], True)
        else:
            seq = rng.choice([*model, rng.randrange(5 * MARK_BLOCK)])
            assert kept.pop(seq) == model.pop(seq, None)
        seq = rng.randrange(5 * MARK_BLOCK)
        assert kept.get(seq) == model.get(seq)
    assert kept.pop_all(list(model)) == (list(model.values()), True)
    assert kept.get_all(list(range(5 * MARK_BLOCK))) == ([None] * 5 * MARK_BLOCK, False)
    assert not kept._bits and not kept._block_tags and not kept._each  # nothing left


def test_a_read_of_one_tag_is_kept_as_bits_and_taken_back_in_bulk():
    kept = KeptTags()
    seqs = list(range(1_000, 1_200))  # across two blocks
    kept.keep_all(seqs, [b"eu"] * len(seqs))
    assert not kept._each and len(kept._bits) == 2
    assert kept.pop_all(seqs[::-1]) == ([b"eu"] * len(seqs), True)
    assert not kept._bits and not kept._block_tags


def test_blocks_of_other_tags_are_taken_back_each_with_its_own():
    kept = KeptTags()
    eu, us = list(range(10)), list(range(MARK_BLOCK, MARK_BLOCK + 10))
    kept.keep_all(eu, [b"eu"] * 10)
    kept.keep_all(us, [b"us"] * 10)
    assert kept.get_all(eu + us) == ([b"eu"] * 10 + [b"us"] * 10, True)
    assert kept.pop_all(us + eu) == ([b"us"] * 10 + [b"eu"] * 10, True)



def _kept_read() -> KeptTags:
    kept = KeptTags()
    kept.keep_all(list(range(2_000, 2_300)), [b"eu"] * 300)  # (a block starts at 2048)
    return kept


@pytest.fixture
def masks_made(monkeypatch):
    """The seqs each list of blocks' masks was made for, by ``KeptTags``."""
    import pzq.delivery.kept_tags as module
    made: list[list[int]] = []
    general = module.ascending_masks

    def counted(seqs):
        made.append(seqs)
        return general(seqs)
    monkeypatch.setattr(module, "ascending_masks", counted)
    return made


def test_the_ack_of_a_run_within_one_block_is_taken_with_its_one_mask(masks_made):
    """An ACK of a read's run within one block, all kept as its bits (the common ACK),
    is taken with its one mask, no list of masks made first (one before); asked again,
    nothing is kept, as before."""
    kept = _kept_read()
    masks_made.clear()  # (the read's)
    run = list(range(2_048, 2_148))
    assert kept.pop_all_masked(run, ascending=True) == (
        [b"eu"] * 100, True, [(2_048, (1 << 100) - 1)])
    assert masks_made == []
    assert kept.pop_all_masked(run, ascending=True) == ([None] * 100, False, None)
    assert kept.get_all(list(range(2_000, 2_048)) + list(range(2_148, 2_300))) == (
        [b"eu"] * 200, True)


@pytest.mark.parametrize("case", ["across two blocks", "one not kept", "one kept alone",
                                  "not a run"])
def test_any_other_ack_is_taken_the_general_way_with_the_same_answer(case, masks_made):
    kept, model = _kept_read(), dict.fromkeys(range(2_000, 2_300), b"eu")
    seqs = list(range(2_048, 2_148))
    if case == "across two blocks":
        seqs = list(range(2_040, 2_060))
    elif case == "one not kept":
        assert kept.pop(2_100) == model.pop(2_100)
    elif case == "one kept alone":
        kept.keep(2_100, b"us")
        model[2_100] = b"us"
    else:
        seqs = seqs[::2]
    expected = list(map(model.pop, seqs, repeat(None)))
    masks_made.clear()  # (the read's)
    tags, every, masks = kept.pop_all_masked(seqs, ascending=True)
    assert (tags, every) == (expected, None not in expected)
    assert masks_made or masks is None  # the general way (one step makes none, gives one)
    assert kept.get_all(list(model)) == (list(model.values()), True)
