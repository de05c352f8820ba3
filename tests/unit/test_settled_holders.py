"""Who holds an ACK's messages, once for all of them where that depends on their tags
alone (Topics._settled_holders): the same answer as asking of each message, and the
topic's groups walked once for the seq it is settled from and once for the holders."""

from __future__ import annotations

import random

import pytest

from pzq.store.topic_model import DEFAULT_ALL, DEFAULT_NONE, DEFAULT_UNCLAIMED, Group, Topic
from pzq.store.topics import Topics

FILTERS = ["", "", "eu-*", "us"]
TAGS = [b"", b"eu-west", b"eu-", b"us", b"us-east"]


class CountedWalks(dict[str, Group]):
    """A topic's groups that count the walks of them."""

    walks = 0

    def values(self):  # type: ignore[override]
        self.walks += 1
        return super().values()


def a_topic(rng: random.Random) -> Topic:
    topic = Topic("orders", 1, default_rule=rng.choice([DEFAULT_ALL, DEFAULT_NONE,
                                                        DEFAULT_UNCLAIMED]),
                  default_from=rng.choice([None, 0, 40]))
    for at in range(rng.randint(1, 4)):
        name = f"g{at}"
        topic.groups[name] = Group(topic, name, at + 2, rng.choice([0, 10, 50]),
                                   rng.choice(FILTERS))
    return topic


def the_long_way(topic: Topic, group_id: int, seqs: list[int], tags: list[bytes]
                 ) -> tuple[list[int], list[int]] | None:
    """Each message's holders asked alone: one answer for all where they agree and every
    seq is at or past where the holders depend on the tag alone."""
    settled_from = max([group.start_seq for group in topic.groups.values()]
                       + [topic.default_from or 0])
    if not tags or min(seqs) < settled_from:
        return None
    found = {tuple(topic.holders(seq, tag)) for seq, tag in zip(seqs, tags, strict=True)}
    if len(found) != 1:
        return None
    holders = list(found.pop())
    return holders, [holder for holder in holders if holder != group_id]


@pytest.mark.parametrize("seed", range(6))
def test_the_holders_of_many_are_each_ones(seed):
    rng = random.Random(seed)
    for _ in range(300):
        topic = a_topic(rng)
        group_id = rng.choice([*(group.id for group in topic.groups.values()), 1])
        low = rng.choice([0, 20, 45, 60])
        seqs = sorted(rng.sample(range(low, low + 200), rng.randint(1, 8)))
        tags = (rng.choices(TAGS, k=len(seqs)) if rng.random() < 0.5
                else [rng.choice(TAGS)] * len(seqs))
        assert Topics._settled_holders(topic, group_id, seqs, tags, seqs[0]) \
            == the_long_way(topic, group_id, seqs, tags)


def test_an_ack_of_one_tag_walks_the_groups_twice():
    topic = Topic("orders", 1)
    groups = CountedWalks()
    for at in range(3):
        groups[f"g{at}"] = Group(topic, f"g{at}", at + 2, 0)
    topic.groups = groups
    seqs = list(range(100, 200))
    assert Topics._settled_holders(topic, 3, seqs, [b""] * 100, 100) == ([2, 3, 4], [2, 4])
    # the seq it is settled from, and the holders once for the tag: not the settled
    # seq asked again for the holders (three walks before)
    assert groups.walks == 2
