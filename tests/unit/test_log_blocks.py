"""A topic's log in blocks (pzq.store.log_blocks): what the groups of a topic read from
the blocks in memory is what the stored blocks hold, while groups ACK, messages come,
a group seeks back, and after a failed batch; a group's filter reads the tags of the
log alone, never a body."""

from __future__ import annotations

import random

import pytest

from pzq.admin import group_ops
from pzq.admin.topic_walks import TopicWalks
from pzq.cluster.lone import NoCluster
from pzq.counters import Counters
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.groups import GroupArea
from pzq.delivery.state import DeliveryState
from pzq.errors import StoreError
from pzq.serving.named_groups import NoConsumeEndpoint
from pzq.store import keyspace, record
from pzq.store.store import Store
from pzq.store.topics import Topics
from tests.support.stored import FailNext, stored_log
from tests.unit.test_group_reads import (
    SETTINGS,
    open_node,
    seqs_of,
    store_messages,
    three_groups,
)

pytestmark = pytest.mark.timeout(60)


def held(store, topics, area, first, limit):
    """What a group's read from ``first`` must return, from the stored blocks: of the
    first ``limit`` messages of the topic's log from there, those the group is not done
    with (the next ``limit`` when it is done with all), less messages no longer stored."""
    logged = [seq for seq, _ in stored_log(store, area.group.topic.id) if seq >= first]
    for at in range(0, len(logged), limit):
        kept = [seq for seq in logged[at:at + limit] if not topics.is_done(area.group.id, seq)]
        if kept:
            return [seq for seq in kept if store.get_own(seq) is not None]
    return []


def test_each_read_is_what_the_store_holds_while_groups_ack_and_messages_come(tmp_path):
    """Three groups at their own pace, with ACKs (the last group's deletes the message),
    new messages and a seek back in between, across blocks: every read as the stored
    blocks say, and the blocks in memory the stored ones, also once read again."""
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, 1500)
    cursors = [0, 0, 0]
    rng, flip = random.Random(41), random.Random(5)
    for step in range(400):
        at = rng.randrange(3)
        area = areas[at]
        if step % 50 == 49:
            store_messages(store, topics, 300)
        if step == 200:
            cursors[at] = 0  # a seek back: the group reads from the start again
        limit = rng.choice((1, 7, 30, 100))
        expected = held(store, topics, area, cursors[at], limit)
        chunk = area.read(cursors[at], limit)
        assert seqs_of(chunk) == expected, (step, at, cursors[at], limit)
        assert [value for _, value in chunk.found] == list(map(store.get_own, expected))
        cursors[at] = chunk.next_seq
        acked = seqs_of(chunk)[:rng.randrange(len(chunk.found) + 1)]
        batch = store.begin()
        area.delete_all(batch, acked, [len(store.get_own(seq)) for seq in acked],
                        ascending=flip.random() < 0.5)  # (a read's seqs are)
        store.commit(batch)
    orders = topics.topics["orders"].id
    stored = stored_log(store, orders)
    assert stored[0][0] > 0 and len(stored) < 1500 + 8 * 300  # some left, not every one
    assert topics.logs.walk(orders) == stored
    topics.logs.failed()  # read again from the store
    assert topics.logs.walk(orders) == stored
    store.close()


def test_a_group_s_filter_reads_the_log_s_tags_and_no_body(tmp_path, monkeypatch):
    """Tags mixed within a block, and a block mostly of a tag it does not take: a filtered
    group reads the seqs of its tags in order from the log alone (a key a block and tag),
    and its backlog is counted the same way."""
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    batch = store.begin()
    eu = topics.add_group(orders, "eu", 0, "eu-*", 0)
    store.commit(batch)
    tags = [b"eu-west", b"us", b"eu-north"] * 400 + [b"us"] * 1100 + [b"eu-west"] * 10
    for tag in tags:
        store_messages(store, topics, 1, tag=tag)
    wanted = [seq for seq, tag in enumerate(tags) if tag.startswith(b"eu-")]
    reads = []
    for name in ("get", "get_own", "get_all", "iterate", "read_up_to", "read_run", "scan"):
        monkeypatch.setattr(store, name, lambda *args, _name=name: reads.append(_name))
    seqs, found_tags, next_seq = GroupArea(store, topics, eu)._walk_log(0, 10_000)
    assert reads == []
    assert seqs == wanted and found_tags == [tags[seq] for seq in wanted]
    assert next_seq == len(tags)
    assert topics.logs.count(orders.id, 0, None, eu.takes) == len(wanted) == eu.backlog
    assert topics.logs.count(orders.id, 1000, 2400, eu.takes) == len(
        [seq for seq in wanted if 1000 <= seq < 2400])
    monkeypatch.undo()
    batch = store.begin()
    late = topics.add_group(orders, "late", 0, "eu-north", 0)  # counted from the log
    store.commit(batch)
    assert late.backlog == tags.count(b"eu-north")
    assert len([key for key, _ in store.iterate(keyspace.log_block_prefix(orders.id))]) == 8
    store.close()


def test_a_failed_batch_s_log_is_read_again_from_the_store(tmp_path):
    store = Store.open(tmp_path / "db")
    topics = Topics(store, "default")
    store.register(topics)
    failing = FailNext()
    store.register(failing)
    (area, *_) = three_groups(store, topics)
    store_messages(store, topics, 10)
    orders = topics.topics["orders"]
    batch = store.begin()
    value = record.encode(b"id", (b"TOPIC:orders",), (b"x",), 1)
    seq = batch.add_message(value)
    topics.note_new(batch, seq, orders, b"", len(value))
    topics.drop(batch, 3, orders, b"", 0, area.group.id)
    topics.logs.remove(batch, orders.id, [5, 6])
    assert [seq for seq, _ in topics.logs.walk(orders.id)] == [0, 1, 2, 4, *range(7, 11)]
    failing.armed = True
    with pytest.raises(StoreError):
        store.commit(batch)
    assert topics.logs.walk(orders.id) == stored_log(store, orders.id) == [
        (seq, b"") for seq in range(10)]
    assert seqs_of(area.read(0, 100)) == list(range(10))
    store.close()


def test_blocks_cleared_in_a_batch_go_with_it_when_another_is_written_first(tmp_path):
    """Messages leave in one batch while another is begun and written before it: the
    blocks the first cleared are put into the first (written after), not lost, and
    those the second clears go with the second. (Blocks of their own: a batch written
    first that clears a block an earlier one cleared too would be undone by the
    earlier's write, as when each removal put its block at once; the node never has
    two such batches open.)"""
    store, topics = open_node(tmp_path / "db")
    three_groups(store, topics)
    store_messages(store, topics, 2100)
    orders = topics.topics["orders"].id
    first = store.begin()
    topics.logs.clear(first, orders, 0, 1 << 5)  # (a message ACKed alone: its bit)
    topics.logs.remove(first, orders, [1030, 1031])
    second = store.begin()
    topics.logs.remove(second, orders, [2060])
    second.delete(b"unrelated")  # (a batch with something in it is written)
    store.commit(second)
    stored = [seq for seq, _ in stored_log(store, orders)]
    assert 2060 not in stored and {5, 1030, 1031} <= set(stored)  # the first's: not yet
    first.delete(b"unrelated")
    store.commit(first)
    left = [(seq, b"") for seq in range(2100) if seq not in (5, 1030, 1031, 2060)]
    assert topics.logs.walk(orders) == stored_log(store, orders) == left
    store.close()


def test_the_oldest_logged_message_is_the_lowest_bit_of_the_first_block(tmp_path):
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    orders = topics.topics["orders"].id
    assert topics.logs.oldest(orders) is None
    store_messages(store, topics, 1030)
    batch = store.begin()
    for area in areas:  # every group done with the first 1 025: gone, a block with them
        area.delete_all(batch, list(range(1025)), [0] * 1025)
    store.commit(batch)
    assert topics.logs.oldest(orders) == 1025
    assert topics.logs.kept() == 1
    store.close()


def test_a_read_is_the_reference_s_for_any_start_end_count_and_filter(tmp_path):
    """Blocks dense and sparse, tags mixed: every read the first ``count`` of what a
    sorted list of the log says from ``first`` to ``newest``, and says it reached
    ``newest`` only when nothing is left (and surely when it returned fewer)."""
    store, topics = open_node(tmp_path / "db")
    rng = random.Random(5)
    logged = sorted(rng.sample(range(6000), 2500) + list(range(6000, 7100)))
    tagged = [(seq, rng.choice((b"a", b"b", b"ab"))) for seq in logged]
    batch = store.begin()
    topics.logs.add_tagged(batch, 9, tagged)
    store.commit(batch)
    takes_a = b"a".__le__  # (any order of tags will do: a filter of some of them)
    for _ in range(400):
        first, newest = sorted(rng.randrange(7300) for _ in range(2))
        count = rng.choice((1, 3, 100, 1000, 5000))
        takes = rng.choice((None, takes_a))
        wanted = [(seq, tag) for seq, tag in tagged if first <= seq <= newest
                  and (takes is None or takes(tag))]
        seqs, tags, reached = topics.logs.read(9, first, newest, count, takes)
        assert list(zip(seqs, tags, strict=True)) == wanted[:count], (first, newest, count)
        assert reached <= (len(wanted) <= count)  # reached: nothing more (less: sure)
        assert reached >= (len(wanted) < count)
    assert topics.logs.walk(9) == tagged == stored_log(store, 9)
    store.close()


def test_messages_acked_one_by_one_leave_the_stored_blocks_as_those_in_memory(tmp_path):
    """Three groups ACK messages alone, several a batch and across blocks (the last
    group's ACK is the message's leaving; its block is written once a batch): after each
    batch the stored blocks are those in memory, and none is left at the end."""
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, 3000)
    orders = topics.topics["orders"].id
    rng = random.Random(7)
    pending = [list(range(3000)) for _ in areas]
    while any(pending):
        batch = store.begin()
        for area, seqs in zip(areas, pending, strict=True):
            for _ in range(min(len(seqs), rng.randrange(1, 60))):
                seq = seqs.pop(rng.randrange(len(seqs)) if rng.random() < 0.3 else 0)
                area.read(seq, 1)  # (the tag the ACK needs is kept by a read)
                area.delete(batch, seq, len(store.get_own(seq)))
        store.commit(batch)
        assert topics.logs.walk(orders) == stored_log(store, orders)
    assert stored_log(store, orders) == []
    topics.logs.failed()
    assert topics.logs.walk(orders) == []
    store.close()


def test_an_operator_s_walks_leave_their_blocks_stored_as_those_in_memory(tmp_path):
    """An operator's REMOVE of messages (many leave at once), an EMPTY of two groups
    (marks alone) and a seek of the third past most of the rest (each message leaving
    alone as that group is done with it), each in its settled batch: the blocks they
    cleared in memory are written with that batch, as the store reopened reads them."""
    store, topics = open_node(tmp_path / "db")
    a, b, c = three_groups(store, topics)
    store_messages(store, topics, 3000)
    orders = topics.topics["orders"]
    default = DeliveryState(DefaultArea(store, topics), SETTINGS, Counters())
    walks = TopicWalks(store, topics, NoConsumeEndpoint(), default, NoCluster(None))
    purged = set(range(0, 3000, 3))
    assert walks.delete(orders, lambda seq, _tag: seq in purged, 0.0) == len(purged)
    for area in (a, b):
        walks.mark_all_done(orders, area.group.id, area.group.name, 0.0)
    batch = store.begin_settled()
    moved = group_ops.seek(store, topics, batch, c.group, 2500)
    store.commit(batch)
    left = [(seq, b"") for seq in range(2500, 3000) if seq not in purged]
    assert len(moved.deleted) == 2500 - len(purged & set(range(2500)))
    assert topics.logs.walk(orders.id) == stored_log(store, orders.id) == left
    store.close()
    store, topics = open_node(tmp_path / "db")
    assert topics.logs.walk(orders.id) == stored_log(store, orders.id) == left
    store.close()


def test_a_read_asked_again_is_the_log_s_as_it_is_now(tmp_path):
    """Reads of every tag are kept for the topic's other groups (the same lists again):
    asked again after messages came, left (ACKed alone or many) or a failed batch, and
    from starts, ends and counts drawn from a few (so most are asked again), each read
    is what the log holds now, in the batch (as a delivery pass before the write reads)
    and after it."""
    store, topics = open_node(tmp_path / "db")
    failing = FailNext()
    store.register(failing)
    rng = random.Random(17)
    logged: set[int] = set()
    next_seq = 0
    starts, ends, counts = (0, 100, 250, 1100), (300, 1500, 5000), (5, 100, 4096)

    def check_reads(step: int) -> None:
        for _ in range(3):
            first, newest, count = rng.choice(starts), rng.choice(ends), rng.choice(counts)
            wanted = sorted(seq for seq in logged if first <= seq <= newest)[:count]
            seqs, tags, _ = topics.logs.read(9, first, newest, count)
            assert seqs == wanted, (step, first, newest, count)
            assert tags == [b"t"] * len(wanted)

    for step in range(600):
        before = set(logged)
        batch = store.begin()
        batch.put(b"~", b"")  # (a batch of cleared bits alone is not written: an ACK's has deletes)
        move = rng.random()
        if move < 0.15:  # messages come
            seqs = list(range(next_seq, next_seq + rng.choice((1, 40, 300))))
            next_seq = seqs[-1] + 1
            topics.logs.add(batch, 9, b"t", seqs)
            logged.update(seqs)
        elif move < 0.3 and logged:  # some leave, many at once
            gone = rng.sample(sorted(logged), min(len(logged), rng.choice((1, 30))))
            topics.logs.remove(batch, 9, sorted(gone))
            logged.difference_update(gone)
        elif move < 0.35 and logged:  # one leaves alone, its one bit
            seq = rng.choice(sorted(logged))
            topics.logs.clear(batch, 9, seq & keyspace.MARK_BLOCK_OF,
                              1 << (seq & ~keyspace.MARK_BLOCK_OF))
            logged.discard(seq)
        check_reads(step)
        if rng.random() < 0.1:  # the batch fails: the logs as the store holds them
            failing.armed = True
            with pytest.raises(StoreError):
                store.commit(batch)
            logged = before
        else:
            store.commit(batch)
        check_reads(step)
    store.close()
