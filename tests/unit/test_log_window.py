"""A topic's log read ahead once for its groups (pzq.store.log_window): the groups of a
topic read slices of one walk, and what each read returns is what the store holds,
the same as a walk of its own would return, whatever the others did meanwhile."""

from __future__ import annotations

import random

from pzq.store import keyspace, log_window
from tests.unit.test_group_reads import open_node, seqs_of, store_messages, three_groups


def counting_walks(store, monkeypatch):
    """The walks of any topic's log (Store.read_up_to under the log's prefix), counted."""
    walks = []
    read_up_to = store.read_up_to

    def counted(prefix, start, last, count):
        if prefix.startswith(keyspace.TOPIC_LOG_PREFIX):
            walks.append(keyspace.seq_at_end(start))
        return read_up_to(prefix, start, last, count)

    monkeypatch.setattr(store, "read_up_to", counted)
    return walks


def held(store, topics, area, first, limit):
    """What a group's read from ``first`` must return, from a walk of the store: of the
    first ``limit`` entries of the topic's log from there, those the group is not done
    with (the next ``limit`` when it is done with all), less messages no longer stored."""
    topic = area.group.topic
    logged = [keyspace.seq_at_end(key) for key, _ in store.iterate(
        keyspace.topic_log_prefix(topic.id), keyspace.topic_log_key(topic.id, first),
        values=False)]
    for at in range(0, len(logged), limit):
        kept = [seq for seq in logged[at:at + limit] if not topics.is_done(area.group.id, seq)]
        if kept:
            return [seq for seq in kept if store.get_own(seq) is not None]
    return []


def test_three_groups_read_one_walk_of_the_log(tmp_path, monkeypatch):
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, 3 * log_window.READ_AHEAD)
    walks = counting_walks(store, monkeypatch)
    for first in range(0, 3 * log_window.READ_AHEAD, 100):
        for area in areas:
            chunk = area.read(first, 100)
            assert seqs_of(chunk) == list(range(first, min(first + 100, 3 * log_window.READ_AHEAD)))
    assert walks == [0, log_window.READ_AHEAD, 2 * log_window.READ_AHEAD]
    store.close()


def test_each_read_is_what_the_store_holds_while_groups_ack_and_messages_come(
        tmp_path, monkeypatch):
    """Three groups at their own pace, with ACKs (the last group's deletes the message),
    new messages and a seek back in between: every read as a walk of its own."""
    monkeypatch.setattr(log_window, "READ_AHEAD", 64)
    monkeypatch.setattr(log_window, "KEPT_AT_MOST", 160)
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, 300)
    cursors = [0, 0, 0]
    rng = random.Random(41)
    for step in range(400):
        at = rng.randrange(3)
        area = areas[at]
        if step % 50 == 49:
            store_messages(store, topics, 40)
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
        area.delete_all(batch, acked, [len(store.get_own(seq)) for seq in acked])
        store.commit(batch)
    window = topics.log_windows.of(topics.topics["orders"].id)
    assert len(window) <= log_window.KEPT_AT_MOST
    logged = [keyspace.seq_at_end(key) for key, _ in store.iterate(
        keyspace.topic_log_prefix(window.topic_id), keyspace.topic_log_key(window.topic_id,
                                                                         window.base),
        values=False)]
    assert window.seqs == [seq for seq in logged if seq <= window.end]
    store.close()


def test_messages_that_left_the_store_leave_the_window(tmp_path):
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, 50)
    for area in areas:
        assert seqs_of(area.read(0, 20)) == list(range(20))
    window = topics.log_windows.of(topics.topics["orders"].id)
    assert (window.base, window.end, len(window)) == (0, 49, 50)
    batch = store.begin()
    for area in areas:  # the last group's ACK deletes them
        assert area.delete_all(batch, list(range(10)), [0] * 10) == [area is areas[2]] * 10
    store.commit(batch)
    assert (window.base, window.seqs) == (10, list(range(10, 50)))
    assert [store.get_own(seq) for seq in range(10)] == [None] * 10
    topics.move_start(areas[0].group, 0)  # a seek back: behind the window, a walk of its own
    assert seqs_of(areas[0].read(0, 100)) == list(range(10, 50))
    store.close()


def test_a_backfill_of_the_log_lets_the_window_go(tmp_path):
    store, topics = open_node(tmp_path / "db")
    areas = three_groups(store, topics)
    store_messages(store, topics, 10)
    areas[0].read(0, 100)
    orders = topics.topics["orders"]
    assert len(topics.log_windows.of(orders.id)) == 10
    orders.log_from = 5  # (as if the log had been kept from seq 5 on)
    topics.move_start(areas[1].group, 0)
    assert topics.backfill_due()
    topics.backfill()
    assert len(topics.log_windows.of(orders.id)) == 0
    store.close()
