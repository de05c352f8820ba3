"""A named group's read (GroupArea.read) where the records come from the reads kept for
the topic's other groups (Topics.recent_reads: a group's read taken by the others, no
message that left served, nothing read before a failed batch), and the walks the reads
take in C (Store.read_up_to, read_run): what a read returns is what the store holds."""

from __future__ import annotations

import random

import pytest

from pzq.admin.topic_walks import TopicWalks
from pzq.cluster.lone import NoCluster
from pzq.counters import Counters
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.groups import DENSE_AT_LEAST, GroupArea
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.errors import StoreError
from pzq.serving.named_groups import NoConsumeEndpoint
from pzq.store import keyspace, record
from pzq.store.kept_reads import KEPT_RECORD_BYTES, KEPT_SEQS
from pzq.store.store import Store
from pzq.store.topics import Topics
from tests.support.stored import FailNext

SETTINGS = DeliverySettings(ack_timeout_us=1_000_000, inflight_size=1 << 20)
COUNT = 2 * DENSE_AT_LEAST  # enough for a read of the own messages in one walk


def open_node(path):
    store = Store.open(path)
    topics = Topics(store, "default")
    store.register(topics)
    return store, topics


def store_messages(store, topics, count, topic="orders", tag=b"", size=0):
    batch = store.begin()
    for at in range(count):
        value = record.encode(b"id", (b"TOPIC:" + topic.encode(), b"TAG:" + tag),
                              ((b"m%d" % at).ljust(size, b"."),), 1)
        seq = batch.add_message(value)
        topics.note_new(batch, seq, topics.topic(topic, 1), tag, len(value))
    store.commit(batch)


def three_groups(store, topics):
    orders = topics.topic("orders", 0)
    batch = store.begin()
    groups = [topics.add_group(orders, name, 0, "", 0) for name in ("a", "b", "c")]
    store.commit(batch)
    return [GroupArea(store, topics, group) for group in groups]


def seqs_of(chunk):
    return [seq for seq, _ in chunk.found]


STORE_READS = ("get_own", "get_all", "read_up_to", "read_run")  # (get_own: by get)


def counting_store_reads(store, monkeypatch):
    """The store's reads of records, each call's name in the list returned (a ``get``
    of anything else is not counted)."""
    reads: list[str] = []
    for name in STORE_READS:
        real = getattr(store, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            reads.append(_name)
            return _real(*args, **kwargs)
        monkeypatch.setattr(store, name, counted)
    return reads


def test_a_kept_record_of_a_purged_message_is_not_read(tmp_path, monkeypatch):
    """A purge leaves the kept read as it was; the next group's read (of the log less
    the purged, another list) takes the rest from it, not from the store, and none of
    the purged."""
    store, topics = open_node(tmp_path / "db")
    a, b, _ = three_groups(store, topics)
    store_messages(store, topics, COUNT)
    seqs = seqs_of(a.read(0, COUNT))
    assert len(seqs) == COUNT
    orders = topics.topics["orders"]
    default = DeliveryState(DefaultArea(store, topics), SETTINGS, Counters())
    walks = TopicWalks(store, topics, NoConsumeEndpoint(), default, NoCluster(None))
    purged = set(seqs[::2])
    assert walks.delete(orders, lambda seq, _tag: seq in purged, 0.0) == len(purged)
    reads = counting_store_reads(store, monkeypatch)
    chunk = b.read(0, COUNT)
    assert reads == []  # (what a kept: no record read again)
    monkeypatch.undo()
    assert seqs_of(chunk) == seqs[1::2]
    assert chunk.values == list(map(store.get_own, chunk.seqs))
    assert [store.get_own(seq) for seq in purged] == [None] * len(purged)
    store.close()


def test_records_kept_for_other_groups_carry_each_group_s_own_counts_and_marks(tmp_path):
    store, topics = open_node(tmp_path / "db")
    a, b, c = three_groups(store, topics)
    store_messages(store, topics, COUNT)
    seqs = seqs_of(a.read(0, COUNT))
    counted, done, by_default = seqs[3], seqs[5], seqs[7]
    batch = store.begin()
    b.rewrite(batch, counted, record.with_bookkeeping(store.get_own(counted), 7, 2))
    topics.marks.mark(batch, b.group.id, done)
    batch.rewrite_message(by_default, record.with_bookkeeping(store.get_own(by_default), 9, 3))
    store.commit(batch)
    found = dict(b.read(0, COUNT).found)
    assert sorted(found) == [seq for seq in seqs if seq != done]
    assert record.bookkeeping(found[counted]) == (7, 2)
    assert record.bookkeeping(found[by_default]) == (0, 0)  # default's own, not b's
    assert {record.bookkeeping(value) for seq, value in found.items()
            if seq != counted} == {(0, 0)}
    found = dict(c.read(0, COUNT).found)  # nothing of b's for c
    assert sorted(found) == seqs
    assert {record.bookkeeping(value) for value in found.values()} == {(0, 0)}
    store.close()


def test_records_are_kept_with_default_s_counts_zeroed_and_each_group_s_own_put_in(tmp_path):
    """A record ``default`` counted before any group read it: the first read looks at it
    and keeps it zeroed, so the other groups take it as it is kept; a group's own
    count still goes in, and the store's record keeps default's."""
    store, topics = open_node(tmp_path / "db")
    a, b, c = three_groups(store, topics)
    store_messages(store, topics, COUNT)
    by_default = 7
    batch = store.begin()
    batch.rewrite_message(by_default, record.with_bookkeeping(store.get_own(by_default), 9, 3))
    c.rewrite(batch, by_default, record.with_bookkeeping(store.get_own(by_default), 4, 2))
    store.commit(batch)
    assert {record.bookkeeping(value) for value in a.read(0, COUNT).values} == {(0, 0)}
    assert record.bookkeeping(store.get_own(by_default)) == (9, 3)
    chunk = b.read(0, COUNT)
    assert chunk.fresh and {record.bookkeeping(value) for value in chunk.values} == {(0, 0)}
    found = dict(c.read(0, COUNT).found)
    assert record.bookkeeping(found.pop(by_default)) == (4, 2)
    assert {record.bookkeeping(value) for value in found.values()} == {(0, 0)}
    assert chunk.values == [record.with_bookkeeping(value, 0, 0)
                            for value in map(store.get_own, chunk.seqs)]
    store.close()


def test_long_records_are_not_kept_for_other_groups(tmp_path, monkeypatch):
    """A read with a record longer than KEPT_RECORD_BYTES is not kept: each group reads
    it from the store; a read of short ones is read once for all."""
    store, topics = open_node(tmp_path / "db")
    a, b, c = three_groups(store, topics)
    store_messages(store, topics, COUNT // 2)
    store_messages(store, topics, COUNT // 2, size=KEPT_RECORD_BYTES + 1)
    reads = counting_store_reads(store, monkeypatch)
    found = a.read(0, COUNT).found
    assert reads and b.read(0, COUNT).found == found
    assert reads == 2 * reads[:len(reads) // 2]  # (b's read the same as a's)
    del reads[:]
    short = a.read(0, COUNT // 2).found
    assert reads and c.read(0, COUNT // 2).found == short
    assert len(reads) == 1  # (a's alone)
    monkeypatch.undo()
    assert [seq for seq, _ in found] == list(range(COUNT))
    assert [value for _, value in found] == list(map(store.get_own, range(COUNT)))
    store.close()


def test_a_read_not_kept_as_a_list_takes_what_the_kept_reads_hold_of_its_seqs(
        tmp_path, monkeypatch):
    """A read starting elsewhere in a stretch read before, or of some of its seqs (a
    filtered group's), takes the kept records, none read again; seqs kept nowhere are
    read from the store, and the oldest reads are let go past KEPT_SEQS."""
    store, topics = open_node(tmp_path / "db")
    a, b, _ = three_groups(store, topics)
    store_messages(store, topics, 3 * COUNT)
    a._values(list(range(COUNT)))
    a._values(list(range(COUNT, 2 * COUNT, 2)))  # (a read that is not a run)
    stored = list(map(store.get_own, range(3 * COUNT)))
    reads = counting_store_reads(store, monkeypatch)
    for seqs in (list(range(5, COUNT)), list(range(3, COUNT, 3)), [COUNT - 1, COUNT],
                 list(range(COUNT - 4, 2 * COUNT, 2)), [2 * COUNT - 2]):
        values, zeroed = b._values(seqs)
        assert zeroed and values == [stored[seq] for seq in seqs]
    assert reads == []
    values, _ = b._values([COUNT + 1, COUNT + 2])  # (one kept nowhere: the store's)
    assert values == stored[COUNT + 1:COUNT + 3] and reads == ["get_own"]
    values, _ = b._values(list(range(2 * COUNT, 3 * COUNT)))  # (none kept: one walk)
    assert values == stored[2 * COUNT:] and reads == ["get_own", "read_run"]
    monkeypatch.undo()
    store_messages(store, topics, KEPT_SEQS)
    for first in range(3 * COUNT, 3 * COUNT + KEPT_SEQS, 64):
        a._values(list(range(first, first + 64)))
    reads = counting_store_reads(store, monkeypatch)
    values, _ = b._values(list(range(5, COUNT)))  # (let go: read again)
    assert values == stored[5:COUNT] and reads == ["read_run"]
    store.close()


def test_messages_every_group_is_done_with_leave_the_kept_records(tmp_path):
    """The last group's ACK takes the records it deletes out of those kept, so a read
    of any group never serves a message that left, even once a read reaches it again."""
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, COUNT)
    seqs = seqs_of(areas[0].read(0, COUNT))
    gone = seqs[:COUNT // 2]
    batch = store.begin()
    for area in areas:
        area.read(0, COUNT)
        area.delete_all(batch, gone, [0] * len(gone))
    store.commit(batch)
    assert [store.get_own(seq) for seq in gone] == [None] * len(gone)
    assert seqs_of(areas[2].read(0, COUNT)) == seqs[COUNT // 2:]
    store_messages(store, topics, 3)
    chunk = areas[1].read(0, 2 * COUNT)
    assert seqs_of(chunk) == seqs[COUNT // 2:] + [COUNT, COUNT + 1, COUNT + 2]
    assert chunk.values == list(map(store.get_own, chunk.seqs))
    store.close()


def test_a_failed_batch_drops_the_kept_records(tmp_path, monkeypatch):
    """A batch that fails leaves the store as it was, and nothing read before it stays
    kept (as the topic's log and marks, read again): the reads after it are the store's,
    read again once for all groups."""
    store, topics = open_node(tmp_path / "db")
    failing = FailNext()
    store.register(failing)
    areas = three_groups(store, topics)
    store_messages(store, topics, COUNT)
    seqs = seqs_of(areas[0].read(0, COUNT))
    batch = store.begin()
    for area in areas:
        area.read(0, COUNT)
        area.delete_all(batch, seqs[:4], [0] * 4)
    failing.armed = True
    with pytest.raises(StoreError):
        store.commit(batch)
    reads = counting_store_reads(store, monkeypatch)
    chunks = [area.read(0, COUNT) for area in areas]
    assert reads == ["read_run"]  # (the first group's: none kept from before the failure)
    monkeypatch.undo()
    for chunk in chunks:
        assert chunk.seqs == seqs
        assert chunk.values == list(map(store.get_own, seqs))
    store.close()


def test_a_read_of_the_log_stops_at_the_newest_message(tmp_path):
    store, topics = open_node(tmp_path / "db")
    a, _, _ = three_groups(store, topics)
    store_messages(store, topics, 10)
    store_messages(store, topics, 5, topic="other")
    a.group.topic.newest = 5  # (a message of the topic still being written, say)
    chunk = a.read(0, 100)
    assert (seqs_of(chunk), chunk.next_seq) == (list(range(6)), 15)
    store.close()


def own_range(store, first, last, count):
    return [keyspace.own_seq(key) for key, _ in store.read_up_to(
        keyspace.OWN_PREFIX, keyspace.own_key(first), keyspace.own_key(last), count)]


def test_store_reads_a_range_up_to_a_key(tmp_path):
    store, topics = open_node(tmp_path / "db")
    three_groups(store, topics)
    store_messages(store, topics, 10)
    assert own_range(store, 2, 6, 100) == [2, 3, 4, 5, 6]
    assert own_range(store, 2, 6, 3) == [2, 3, 4]
    assert own_range(store, 6, 6, 100) == [6]
    assert own_range(store, 7, 6, 100) == []
    assert own_range(store, 8, 20, 100) == [8, 9]  # the last not stored
    assert own_range(store, 0, 20, 4) == [0, 1, 2, 3]
    store.close()


def test_store_reads_a_run_s_values_alone(tmp_path):
    store, topics = open_node(tmp_path / "db")
    three_groups(store, topics)
    store_messages(store, topics, 10)
    values = [store.get_own(seq) for seq in range(10)]

    def run(first, last, count):
        return store.read_run(keyspace.own_key(first), keyspace.own_key(last + 1), count)
    assert run(2, 6, 5) == values[2:7]
    assert run(2, 6, 3) == values[2:5]
    assert run(8, 20, 13) == values[8:]  # fewer: not each stored
    batch = store.begin()
    batch.delete(keyspace.own_key(4))
    store.commit(batch)
    assert run(2, 6, 5) == values[2:4] + values[5:7]
    store.close()


def test_one_group_reads_a_run_of_records_in_one_walk_of_their_values(tmp_path, monkeypatch):
    """A group alone on its topic reads a run of its messages by their values alone (no
    key objects, no pairs, no look at the last key), and one of them not stored any
    more falls back to the walk of keys and values."""
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    batch = store.begin()
    alone = GroupArea(store, topics, topics.add_group(orders, "alone", 0, "", 0))
    store.commit(batch)
    store_messages(store, topics, COUNT)
    reads = []
    for name in ("get", "get_own", "get_all", "read_up_to"):
        monkeypatch.setattr(store, name, lambda *args, _name=name: reads.append(_name))
    values, _ = alone._values(list(range(COUNT)))
    assert reads == []
    monkeypatch.undo()
    assert values == [store.get_own(seq) for seq in range(COUNT)]
    batch = store.begin()
    batch.delete(keyspace.own_key(5))
    store.commit(batch)
    values, _ = alone._values(list(range(COUNT)))
    assert values == [store.get_own(seq) for seq in range(COUNT)] and values[5] is None
    store.close()


def test_a_group_alone_reads_random_runs_and_spans_as_the_store_holds_them(tmp_path):
    """Random runs and spans of a store with random records deleted (some runs whole,
    some with gaps, some past the last record): each read is ``get_own`` of each seq."""
    rng = random.Random(41)
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    batch = store.begin()
    alone = GroupArea(store, topics, topics.add_group(orders, "alone", 0, "", 0))
    store.commit(batch)
    store_messages(store, topics, 400, size=40)
    batch = store.begin()
    for seq in rng.sample(range(400), 30):
        batch.delete(keyspace.own_key(seq))
    store.commit(batch)
    for _ in range(200):
        first = rng.randrange(420)
        seqs = list(range(first, first + rng.randrange(1, 3 * DENSE_AT_LEAST)))
        if rng.random() < 0.3:
            seqs = sorted(rng.sample(seqs, max(1, len(seqs) * 2 // 3)))
        values, _ = alone._values(seqs)
        assert values == [store.get_own(seq) for seq in seqs]
    store.close()


def test_a_dense_read_takes_each_record_of_its_own_seq(tmp_path):
    store, topics = open_node(tmp_path / "db")
    a, _, _ = three_groups(store, topics)
    for _ in range(COUNT):  # the topic's messages with another topic's in between
        store_messages(store, topics, 1)
        store_messages(store, topics, 1, topic="other")
    store_messages(store, topics, COUNT)  # then a span of the topic's alone
    found = a.read(0, 3 * COUNT).found
    seqs = list(range(0, 2 * COUNT, 2)) + list(range(2 * COUNT, 3 * COUNT))
    assert [seq for seq, _ in found] == seqs
    assert [value for _, value in found] == [store.get_own(seq) for seq in seqs]
    topics.recent_reads.clear()  # a walk again, of the span the topic has alone
    found = a.read(2 * COUNT, COUNT).found
    assert found == [(seq, store.get_own(seq)) for seq in range(2 * COUNT, 3 * COUNT)]
    store.close()


def test_defaults_read_describes_each_message_of_mixed_topics_from_one_look_a_header_set(
        tmp_path):
    """``default``'s read describes its messages by their header groups in one pass:
    interleaved topics, tags and a message with no headers each get their own."""
    store, topics = open_node(tmp_path / "db")
    batch, expected = store.begin(), {}
    for at in range(12):
        topic, tag = (("orders", b"red"), ("users", b""), ("orders", b""), (None, b""))[at % 4]
        headers = () if topic is None else (b"TOPIC:" + topic.encode(), b"TAG:" + tag)
        value = record.encode(b"id", headers, (b"m%d" % at,), 1)
        seq = batch.add_message(value)
        about = topics.topic(topic or "default", 1)
        topics.note_new(batch, seq, about, tag, len(value))
        expected[seq] = (about, tag)
    store.commit(batch)
    area = DefaultArea(store, topics)
    assert seqs_of(area.read(0, 100)) == sorted(expected)
    assert area._described == expected
    assert [area.group_names(seq) for seq in expected] == [
        about.holder_names(seq, tag) for seq, (about, tag) in expected.items()]
    store.close()


def test_a_read_of_messages_none_kept_reads_them_in_one_walk(tmp_path, monkeypatch):
    """The first group to read new messages finds none of them kept: one walk of the
    store (no read each), and the others take its read."""
    store, topics = open_node(tmp_path / "db")
    a, b, _ = three_groups(store, topics)
    store_messages(store, topics, COUNT)
    first = seqs_of(a.read(0, COUNT))
    store_messages(store, topics, COUNT)
    reads = counting_store_reads(store, monkeypatch)
    newer = a.read(first[-1] + 1, COUNT)
    assert seqs_of(newer) == list(range(COUNT, 2 * COUNT)) and reads == ["read_run"]
    assert b.read(COUNT, COUNT).values == newer.values  # kept for the others
    assert reads == ["read_run"]
    monkeypatch.undo()
    assert newer.values == list(map(store.get_own, newer.seqs))
    store.close()
