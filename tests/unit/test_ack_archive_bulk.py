"""What the archive asks of a group for an ACK of many keys, asked for all at once: the
same answers as each message asked alone (real stores, named groups with and without
filters, ``default`` beside them, marks of groups done before), and the stored records
read in one pass as one at a time reads them."""

from __future__ import annotations

import pytest

from pzq.archive.format.codec import encode_record, encode_records
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.groups import GroupArea
from pzq.errors import DecodeError
from pzq.protocol.message_keys import message_key, message_keys
from pzq.store import record
from tests.support.topic_store import (
    ack_all,
    deliver_all,
    open_node,
    state_for,
    store_messages,
)

pytestmark = pytest.mark.timeout(60)


def store_tagged(store, topics, tags, topic="orders"):
    store_messages(store, topics, tags, topic, tags=tags)  # each tag its own body too


def each_and_all(area, seqs):
    """(would_release, group_names) of each seq asked alone, and asked for all."""
    return (([area.would_release(seq) for seq in seqs],
             [area.group_names(seq) for seq in seqs]),
            (area.would_release_all(seqs), area.group_names_all(seqs)))


@pytest.mark.parametrize("late_start", [False, True])  # every group started, or not
def test_the_answers_for_many_are_each_message_s(tmp_path, late_start):
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    topics.keep_default(orders)  # default reads beside the groups
    store_tagged(store, topics, [b"eu-1", b"us-1"])
    batch = store.begin()
    audit = topics.add_group(orders, "audit", 0, "", 0)
    eu = topics.add_group(orders, "eu", 0, "eu-*", 0)
    late = topics.add_group(orders, "late", store.next_seq + 3 if late_start else 0, "", 0)
    store.commit(batch)
    while topics.backfill_due():  # the log of the two stored before the groups
        topics.backfill()
    store_tagged(store, topics, [b"eu-%d" % n if n % 3 else b"us-%d" % n for n in range(12)])
    default = state_for(store, DefaultArea(store, topics))
    groups = {group.name: state_for(store, GroupArea(store, topics, group))
              for group in (audit, eu, late)}
    read = {name: deliver_all(state) for name, state in groups.items()}
    seqs = deliver_all(default)
    assert len(seqs) == 14 and read["audit"] == seqs
    acked = {"audit": seqs[::2], "eu": read["eu"][::2], "late": read["late"][-5:],
             "default": seqs[4:10]}
    ack_all(store, groups["audit"], acked["audit"])  # marks: these done with, the others not
    ack_all(store, groups["late"], acked["late"])
    ack_all(store, groups["eu"], acked["eu"])
    ack_all(store, default, acked["default"])
    read["default"] = seqs
    for name, state in {"default": default, **groups}.items():
        held = [seq for seq in read[name] if seq not in acked.get(name, ())]
        alone, together = each_and_all(state.area, held)
        assert together == alone
        if name in ("default", "late"):  # the last holder of some, not of others
            assert set(alone[0]) == {True, False}
    store.close()


def test_a_message_not_read_here_is_asked_alone(tmp_path):
    """An ACK of what the area did not read (sent before a restart): looked up again."""
    store, topics = open_node(tmp_path / "db")
    orders = topics.topic("orders", 0)
    topics.keep_default(orders)
    batch = store.begin()
    audit = topics.add_group(orders, "audit", 0, "", 0)
    store.commit(batch)
    store_tagged(store, topics, [b"a", b"b", b"c"])
    first = state_for(store, GroupArea(store, topics, audit))
    seqs = deliver_all(first)
    ack_all(store, state_for(store, DefaultArea(store, topics)), seqs[:1])
    again = GroupArea(store, topics, audit)  # a restart's: no tag kept
    alone, together = each_and_all(again, seqs)
    assert together == alone == ([True, False, False], [("audit", "default")] * 3)
    store.close()


def test_the_in_flight_entries_of_an_ack_are_what_each_peek_gives(tmp_path):
    store, topics = open_node(tmp_path / "db")
    store_tagged(store, topics, [b"a", b"b", b"c", b"d"])
    state = state_for(store, DefaultArea(store, topics))
    seqs = deliver_all(state)
    state.nack(seqs[1])  # given back: ready again, not in flight
    batch = store.begin()
    unknown = max(seqs) + 10
    assert state.peek_all(batch, [*seqs, unknown]) == [state.peek(batch, seq)
                                                        for seq in seqs]
    assert [entry.seq for entry in state.peek_all(batch, seqs[2:])] == seqs[2:]


def records():
    yield record.encode(b"", (), (), 0)
    yield record.encode(b"id\x00", (b"TOPIC:t", b"TAG:\xff"), (b"",), 7)
    yield record.encode(b"m" * 300, (), (b"p" * 70_000, b"q", b""), 2**63 - 1)
    yield record.with_bookkeeping(record.encode(b"x", (b"K:v",), (b"body",), 5), 9, 3)


def test_records_read_in_one_pass_are_each_record_s_fields():
    values = list(records())
    assert record.fields_all(values) == [record.fields(value) for value in values]
    assert record.fields_all([]) == []


BAD = [b"", b"\x02" + bytes(40),  # no record, another version
       record.encode(b"", (), (), 0) + b"\x00",  # trailing bytes
       *(value[:cut] for value in list(records())[1:] for cut in (21, 25, 30, -1))]


@pytest.mark.parametrize("value", BAD, ids=range(len(BAD)))
def test_a_bad_record_is_refused_in_one_pass_as_alone(value):
    with pytest.raises(DecodeError) as alone:
        record.fields(value)
    with pytest.raises(DecodeError) as together:
        record.fields_all([record.encode(b"ok", (), (b"ok",), 1), value])
    assert str(together.value) == str(alone.value)


def test_message_keys_are_each_seq_s_key():
    seqs = [0, 1, 255, 2**40 + 3, 2**64 - 1]
    assert message_keys(b"0123abcd", seqs) == [message_key(b"0123abcd", seq) for seq in seqs]


def test_records_encoded_in_one_pass_are_each_record_s_bytes():
    frames = [b"", b"s" * 255, b"l" * 256, b"x" * 70_000, b"k"]
    records = [frames, frames[::-1], [b"only"], [b"l" * 256], [], frames[1:3]]
    data, starts = encode_records(records)
    each = [encode_record(frames) for frames in records]
    assert bytes(data) == b"".join(each)
    assert starts == [sum(map(len, each[:at])) for at in range(len(each))]
