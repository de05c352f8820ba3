"""Topics and groups over a real store, in process: who holds what, marks, deletion,
counts and floors across a reopen."""

from __future__ import annotations

import pytest

from pzq.admin import group_ops
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.groups import GroupArea
from pzq.errors import StoreError
from pzq.protocol.headers import topic_and_tag
from pzq.protocol.message_keys import parse_message_key
from pzq.store import keyspace, record
from pzq.store.topics import (
    DEFAULT_ALL,
    DEFAULT_GROUP_ID,
    DEFAULT_NONE,
    DEFAULT_UNCLAIMED,
    filter_takes,
)
from tests.support.stored import FailNext, stored_log
from tests.support.topic_store import deliver_all, open_node, state_for, store_messages


def ack(store, state, seqs):
    batch = store.begin()
    for seq in seqs:
        assert state.ack(batch, seq) is not None
    store.commit(batch)


def test_headers_name_topic_and_tag():
    assert topic_and_tag([b"TOPIC:orders", b"TAG:eu"], "default") == ("orders", b"eu")
    assert topic_and_tag([b"X:y"], "default") == ("default", b"")
    assert filter_takes("eu-*", b"eu-west") and not filter_takes("eu-*", b"us")
    assert filter_takes("us", b"us") and not filter_takes("us", b"us-east")
    assert filter_takes("", b"anything")


def kept_for_default(topics, name="orders"):
    """The topic as ``DECLARE GROUP name default`` leaves it: read beside its groups."""
    topic = topics.topic(name, 0)
    topics.keep_default(topic)
    return topic


def test_a_message_goes_when_the_last_holder_is_done(tmp_path):
    store, topics = open_node(tmp_path / "db")
    group = topics.add_group(kept_for_default(topics), "audit", 0, "", 0)
    store_messages(store, topics, [b"a", b"b"])
    default = state_for(store, DefaultArea(store, topics))
    audit = state_for(store, GroupArea(store, topics, group))
    seqs = deliver_all(default)
    assert deliver_all(audit) == seqs
    ack(store, default, seqs)
    assert store.messages == 2 and topics.is_done(DEFAULT_GROUP_ID, seqs[0])
    ack(store, audit, seqs[:1])
    assert store.messages == 1 and topics.topics["orders"].messages == 1
    first = seqs[0] & keyspace.MARK_BLOCK_OF
    block = store.get(keyspace.mark_block_key(DEFAULT_GROUP_ID, first)) or b""
    assert keyspace.marked_seqs(first, int.from_bytes(block, "little")) == seqs[1:]
    assert seqs[0] not in [seq for seq, _ in stored_log(store, topics.topics["orders"].id)]
    assert group.backlog == 1
    store.close()


def test_filtered_out_counts_as_done_and_floors_survive_a_reopen(tmp_path):
    store, topics = open_node(tmp_path / "db")
    group = topics.add_group(kept_for_default(topics), "eu", 0, "eu*", 0)
    store_messages(store, topics, [b"us1"], tag=b"us")
    store_messages(store, topics, [b"eu1", b"eu2"], tag=b"eu")
    audit = state_for(store, GroupArea(store, topics, group))
    seqs = deliver_all(audit)
    assert len(seqs) == 2 and group.backlog == 2
    ack(store, audit, seqs[:1])
    topics.counts.raise_floor(group, audit.lowest_open())
    store_messages(store, topics, [b"eu3"], tag=b"eu")  # a batch writes the floor
    assert group.floor == seqs[1]
    store.close()
    store, topics = open_node(tmp_path / "db")
    group = topics.topics["orders"].groups["eu"]
    assert (group.floor, group.backlog) == (seqs[1], 2)
    assert topics.topics["orders"].messages == 4
    again = state_for(store, GroupArea(store, topics, group))
    assert len(deliver_all(again)) == 2  # eu2 (unacked) and eu3, not us1 nor eu1
    store.close()


def test_a_changed_topic_is_written_even_by_a_batch_with_nothing_else(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a"], topic="audit")
    audit = topics.topics["audit"]
    audit.remove_default()  # REMOVE GROUP audit default, between two wakes
    topics.changed(audit)
    store.commit(store.begin())  # the next wake has nothing else to write
    store.commit(store.begin())
    store.close()
    store, topics = open_node(tmp_path / "db")
    assert topics.topics["audit"].default_from is None
    assert topics.topics["audit"].default_rule == DEFAULT_NONE
    store.close()


def test_the_next_id_goes_only_with_the_batches_that_take_ids(tmp_path):
    """Not rewritten by every batch; one taken in a failed batch goes with the next,
    and a reopen gives out no id twice."""
    store, topics = open_node(tmp_path / "db")
    failing = FailNext()
    store.register(failing)
    store_messages(store, topics, [b"a"], topic="orders")  # takes an id
    batch = store.begin()
    batch.add_message(record.encode(b"id", (b"TOPIC:orders",), (b"b",), 1))
    store.commit(batch)
    assert batch.operations == 1  # the record alone: no id taken, no next id written
    audit = topics.topic("audit", 1)
    failing.armed = True
    with pytest.raises(StoreError):
        store.commit(store.begin())
    store.commit(store.begin())  # the topic, and the next id, with the next batch
    store.close()
    store, topics = open_node(tmp_path / "db")
    assert topics.topics["audit"].id == audit.id
    taken = {topic.id for topic in topics.topics.values()}
    assert topics.topic("search", 2).id not in taken
    store.close()


def log_keys(store, topic):
    return [seq for seq, _ in stored_log(store, topic.id)]


def test_a_topic_only_default_reads_has_no_log(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a", b"b"])
    orders = topics.topics["orders"]
    assert orders.log_from is None and log_keys(store, orders) == []
    default = state_for(store, DefaultArea(store, topics))
    ack(store, default, deliver_all(default))
    assert store.messages == 0 and orders.messages == 0
    store.close()


def test_backfill_indexes_stored_messages_in_chunks_and_resumes_after_a_reopen(tmp_path):
    store, topics = open_node(tmp_path / "db")
    for n in range(10):
        store_messages(store, topics, [b"o%d" % n])
        store_messages(store, topics, [b"c%d" % n], topic="clicks")
    orders = topics.topics["orders"]
    batch = store.begin()
    group = topics.add_group(orders, "audit", 0, "", 0)  # earliest: every stored one
    store.commit(batch)
    audit = state_for(store, GroupArea(store, topics, group))
    assert topics.backfill_due() and orders.log_from == 20
    assert deliver_all(audit) == []  # nothing before the log reaches back to its start
    topics.backfill(limit=6)  # own messages 14..19: three of orders
    assert orders.log_from == 14 and log_keys(store, orders) == [14, 16, 18]
    store.close()  # a stop (or crash) mid-backfill: the rest is done after the reopen
    store, topics = open_node(tmp_path / "db")
    orders = topics.topics["orders"]
    assert orders.log_from == 14 and topics.backfill_due()
    while topics.backfill_due():
        topics.backfill(limit=6)
    assert orders.log_from == 0 and log_keys(store, orders) == list(range(0, 20, 2))
    group = orders.groups["audit"]
    assert group.backlog == 10
    audit = state_for(store, GroupArea(store, topics, group))
    assert deliver_all(audit) == list(range(0, 20, 2))
    store.close()


def test_a_message_default_acks_during_the_backfill_stays_for_the_group(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a", b"b", b"c"])
    kept_for_default(topics)
    default = state_for(store, DefaultArea(store, topics))
    seqs = deliver_all(default)
    batch = store.begin()
    group = topics.add_group(topics.topics["orders"], "audit", 0, "", 0)
    store.commit(batch)
    ack(store, default, seqs[:2])  # before the backfill ran: the group holds them
    assert store.messages == 3
    while topics.backfill_due():
        topics.backfill(limit=2)
    audit = state_for(store, GroupArea(store, topics, group))
    assert deliver_all(audit) == seqs
    ack(store, audit, seqs)
    assert store.messages == 1  # only c, which default has not acked
    assert log_keys(store, topics.topics["orders"]) == seqs[2:]
    store.close()


def test_a_store_from_before_logs_were_kept_only_for_groups_has_complete_logs(tmp_path):
    import json

    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a"])
    orders = topics.topics["orders"]
    settings = json.loads(store.get(keyspace.topic_key(b"orders")))
    del settings["log_from"]  # as such a store wrote it: every topic had its log
    batch = store.begin()
    batch.put(keyspace.topic_key(b"orders"), json.dumps(settings).encode())
    batch.put(keyspace.log_block_key(orders.id, 0, b""), b"\x01")
    store.commit(batch)
    store.close()
    store, topics = open_node(tmp_path / "db")
    assert topics.topics["orders"].log_from == 0
    batch = store.begin()
    group = topics.add_group(topics.topics["orders"], "audit", 0, "", 0)
    store.commit(batch)
    assert not topics.backfill_due() and group.backlog == 1
    store.close()


def test_a_group_emptied_during_its_backfill_has_no_backlog(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a", b"b", b"c"])
    orders = kept_for_default(topics)
    batch = store.begin()
    group = topics.add_group(orders, "audit", 0, "", 0)
    store.commit(batch)
    batch = store.begin()  # what EMPTY GROUP orders audit does, before the backfill
    for seq, tag in topics.walk(orders):
        topics.done(batch, seq, orders, tag, 10, group.id)
    store.commit(batch)
    default = state_for(store, DefaultArea(store, topics))
    ack(store, default, deliver_all(default)[:1])  # gone before the backfill saw it
    assert store.messages == 2
    while topics.backfill_due():
        topics.backfill(limit=2)
    assert group.backlog == 0 and orders.log_from == 0
    assert deliver_all(state_for(store, GroupArea(store, topics, group))) == []
    store.close()


def test_a_run_of_done_messages_at_the_cursor_is_not_the_end(tmp_path):
    """Out-of-order ACKs leave a run of marks ahead of an unacked message; after a
    restart a read of 10 found only those and the group's cursor jumped to the end,
    stranding the 20 after them for good (its floor was then saved past them)."""
    store, topics = open_node(tmp_path / "db")
    group = topics.add_group(topics.topic("orders", 0), "g", 0, "", 0)
    store_messages(store, topics, [b"m%d" % n for n in range(31)])
    held = state_for(store, GroupArea(store, topics, group))
    keys: list[bytes] = []
    held.deliver(lambda frames: keys.append(frames[0]) or True, 10, 11)
    seqs = [parse_message_key(key)[1] for key in keys]
    ack(store, held, seqs[1:])  # the first stays out; the next 10 are done
    store.close()
    store, topics = open_node(tmp_path / "db")
    group = topics.topics["orders"].groups["g"]
    again = state_for(store, GroupArea(store, topics, group))
    got: list[bytes] = []
    while again.deliver(lambda frames: got.append(frames[0]) or True, 10, 10):
        pass
    delivered = [parse_message_key(key)[1] for key in got]
    assert delivered == [seqs[0], *range(seqs[-1] + 1, seqs[0] + 31)]
    topics.counts.raise_floor(group, again.lowest_open())
    assert group.floor <= seqs[0]
    store.close()


# -- what ``default`` (--send-dsn) holds of a topic with named groups --------------------


def test_a_topic_read_by_named_groups_alone_shrinks_as_they_ack(tmp_path):
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    billing = topics.add_group(orders, "billing", 0, "", 0)
    audit = topics.add_group(orders, "audit", 0, "", 0)
    store_messages(store, topics, [b"m%d" % n for n in range(20)])
    default = state_for(store, DefaultArea(store, topics))
    assert deliver_all(default) == []  # nobody's on --send-dsn: it holds none of them
    for group in (billing, audit):
        state = state_for(store, GroupArea(store, topics, group))
        seqs = deliver_all(state)
        assert len(seqs) == 20
        ack(store, state, seqs)
    assert store.messages == 0 and orders.messages == 0
    assert orders.default_rule == DEFAULT_UNCLAIMED
    store.close()


def test_default_keeps_what_no_named_group_takes(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"before"])  # before any group: default's alone
    orders = topics.topics["orders"]
    batch = store.begin()
    eu = topics.add_group(orders, "eu", store.next_seq, "eu-*", 0)  # start latest
    store.commit(batch)
    store_messages(store, topics, [b"us"], tag=b"us-east")  # its filter leaves it out
    store_messages(store, topics, [b"eu"], tag=b"eu-west")
    default = state_for(store, DefaultArea(store, topics))
    group = state_for(store, GroupArea(store, topics, eu))
    for_default = deliver_all(default)
    for_group = deliver_all(group)
    assert len(for_default) == 2 and len(for_group) == 1
    assert not set(for_default) & set(for_group)  # one reader each: nothing twice
    ack(store, default, for_default)
    ack(store, group, for_group)
    assert store.messages == 0
    store.close()


@pytest.mark.parametrize("rule", [DEFAULT_UNCLAIMED, DEFAULT_ALL, DEFAULT_NONE])
def test_default_gets_what_its_rule_holds_after_a_reopen(tmp_path, rule):
    """Each rule as before a restart: the registry is read whole before anything is
    derived from it (a topic read before its groups looked wholly default's)."""
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"eu"], tag=b"eu-west")
    orders = topics.topics["orders"]
    batch = store.begin()
    topics.add_group(orders, "jobs", 0, "eu-*", 0)
    if rule == DEFAULT_ALL:  # declared once the group was there: from the next one on
        topics.keep_default(orders)
    elif rule == DEFAULT_NONE:
        orders.remove_default()
        topics.changed(orders)
    store.commit(batch)
    store_messages(store, topics, [b"us"], tag=b"us")
    store_messages(store, topics, [b"eu"], tag=b"eu-west")
    expected = {DEFAULT_UNCLAIMED: [1], DEFAULT_ALL: [1, 2], DEFAULT_NONE: []}[rule]
    assert deliver_all(state_for(store, DefaultArea(store, topics))) == expected
    for _ in range(2):
        store.close()
        store, topics = open_node(tmp_path / "db")
        assert deliver_all(state_for(store, DefaultArea(store, topics))) == expected
    store.close()


def test_a_topic_read_on_send_dsn_stays_so_when_a_group_comes(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a"])
    default = state_for(store, DefaultArea(store, topics))
    ack(store, default, deliver_all(default))  # a consumer on --send-dsn reads it
    orders = topics.topics["orders"]
    assert orders.default_rule == DEFAULT_ALL
    group = topics.add_group(orders, "audit", store.next_seq, "", 0)
    store_messages(store, topics, [b"b"])
    audit = state_for(store, GroupArea(store, topics, group))
    assert deliver_all(default) == deliver_all(audit)  # both read it
    store.close()
    store, topics = open_node(tmp_path / "db")
    assert topics.topics["orders"].default_rule == DEFAULT_ALL  # across a restart
    store.close()


def test_a_store_from_before_the_rule_keeps_default_on_every_topic(tmp_path):
    import json

    store, topics = open_node(tmp_path / "db")
    store_messages(store, topics, [b"a"])
    store_messages(store, topics, [b"b"], topic="audit")
    topics.topics["audit"].remove_default()
    topics.changed(topics.topics["audit"])
    store.commit(store.begin())
    batch = store.begin()
    for name in (b"orders", b"audit"):  # as an earlier pzq wrote them
        settings = json.loads(store.get(keyspace.topic_key(name)))
        del settings["default_rule"]
        batch.put(keyspace.topic_key(name), json.dumps(settings).encode())
    store.commit(batch)
    store.close()
    store, topics = open_node(tmp_path / "db")
    assert topics.topics["orders"].default_rule == DEFAULT_ALL
    assert topics.topics["audit"].default_rule == DEFAULT_NONE
    group = topics.add_group(topics.topics["orders"], "g", 0, "", 0)
    default = state_for(store, DefaultArea(store, topics))
    assert len(deliver_all(default)) == 1 and group.topic.holders(0, b"") == [group.id,
                                                                            DEFAULT_GROUP_ID]
    store.close()


def test_a_seek_after_a_dead_letter_owed_moves_each_message_once(tmp_path):
    """A REJECT (or an expiry found at delivery) leaves a move to the dead letters for
    the next batch; a SEEK GROUP answered in the same wake began its batch with that
    move and then walked the store, where the message still was: it deleted it a
    second time, and the store's counts went below zero (the write failed)."""
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    topics.add_group(orders, "g", 0, "", 0)
    store_messages(store, topics, [b"m0", b"m1"])
    group = orders.groups["g"]
    state = state_for(store, GroupArea(store, topics, group))
    first, second = deliver_all(state)
    assert state.reject(first)  # to the dead letters with the next batch
    batch = store.begin_settled()  # as SEEK GROUP begins its walk
    moved = group_ops.seek(store, topics, batch, group, second + 1)
    store.commit(batch)
    assert moved.deleted == [second]
    assert (store.messages, store.dead_letters) == (0, 1)
    assert (orders.messages, orders.stored_bytes) == (0, 0)
    store.close()
