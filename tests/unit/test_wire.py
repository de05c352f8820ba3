"""Every frame layout round-trips, and garbage gives one clear DecodeError."""

from __future__ import annotations

import pytest

from pzq.errors import DecodeError
from pzq.protocol import consume as cw
from pzq.protocol import frames as wire
from pzq.protocol.frame_groups import group_chunks
from pzq.protocol.message_keys import (
    message_key,
    message_key_numbers,
    parse_message_key,
    parse_message_keys,
)

pytestmark = pytest.mark.timeout(10)


def test_produce_round_trip():
    frames = [b"rid", *wire.encode_produce(b"m1", [b"a", b"", b"c"], (b"TOPIC:orders",))]
    produce = wire.decode_produce(frames, max_body_size=10)
    assert (produce.routing_id, produce.msg_id) == (b"rid", b"m1")
    assert produce.headers == (b"TOPIC:orders",)
    assert produce.parts == (b"a", b"", b"c")  # an empty part after the delimiter is body
    assert produce.body_size == 2


@pytest.mark.parametrize("frames, reason", [
    ([b"rid"], "missing message id"),
    ([b"rid", b"m"], "missing empty delimiter"),
    ([b"rid", b"m", b"TOPIC:x"], "missing empty delimiter"),
    ([b"rid", b"m", b""], "no body part"),
    ([b"rid", b"m", b"", b"12345678901"], "exceeds the limit of 10"),
    ([b"rid", b"m", b"bad header", b"", b"x"], "not NAME:value"),
    ([b"rid", b"m", b":value", b"", b"x"], "not NAME:value"),
    ([b"rid", b"m", b"replica:x", b"", b"x"], "reserved"),
    ([b"rid", b"m", b"REMOVE:x", b"", b"x"], "reserved"),
])
def test_produce_garbage(frames, reason):
    with pytest.raises(wire.ProduceRefused) as raised:
        wire.decode_produce(frames, max_body_size=10)
    assert reason in raised.value.reason
    assert raised.value.routing_id == b"rid"
    assert raised.value.msg_id == (frames[1] if len(frames) > 1 else b"")


def test_produce_with_no_frames_at_all():
    with pytest.raises(DecodeError):
        wire.decode_produce([], max_body_size=10)


def test_producer_ack_layout_and_round_trip():
    ok = wire.encode_producer_ack(b"rid", b"m1", True)
    assert ok == [b"rid", b"m1", b"1", b""]
    failed = wire.encode_producer_ack(b"rid", b"m2", False, b"why")
    assert failed == [b"rid", b"m2", b"0", b"", b"why"]
    assert wire.decode_producer_ack(failed[1:]) == wire.ProducerAck(b"m2", False, b"why")
    replication = wire.decode_producer_ack([b"m3", b"1", b"", b"REPLICATION_FAILED"])
    assert replication.ok and replication.replication_failed


@pytest.mark.parametrize("frames", [[b"m"], [b"m", b"1"], [b"m", b"2", b""], [b"m", b"1", b"x"]])
def test_producer_ack_garbage(frames):
    with pytest.raises(DecodeError):
        wire.decode_producer_ack(frames)


def test_delivery_by_default_is_the_original_layout():
    frames = wire.encode_delivery(b"k", 1700000000123456, 5000000, (b"p1", b"p2"))
    assert frames == [b"k", b"1700000000123456", b"5000000", b"", b"p1", b"p2"]
    # The original's own consumer takes the body as every frame from index 5 on.
    assert [b"peer", *frames][5:] == [b"p1", b"p2"]
    delivery = wire.decode_delivery([b"peer", *frames])
    assert (delivery.key, delivery.sent_us, delivery.ack_timeout_us) == (b"k", 1700000000123456,
                                                                         5000000)
    assert delivery.headers == {} and delivery.deliveries is None
    assert delivery.parts == (b"p1", b"p2")


def test_delivery_with_headers_round_trip():
    headers = wire.delivery_headers(3, (b"TOPIC:t",))
    frames = wire.encode_delivery(b"k", 1700000000123456, 5000000, (b"p1", b"p2"), headers)
    assert frames[:5] == [b"k", b"1700000000123456", b"5000000", b"DELIVERY:3", b"TOPIC:t"]
    delivery = wire.decode_delivery([b"peer", *frames])
    assert delivery.headers == {"DELIVERY": "3", "TOPIC": "t"}
    assert delivery.deliveries == 3
    assert delivery.parts == (b"p1", b"p2")


def test_delivery_whose_body_starts_with_an_empty_part():
    frames = wire.encode_delivery(b"k", 1, 2, (b"", b"tail"))
    assert wire.decode_delivery([b"peer", *frames]).parts == (b"", b"tail")


@pytest.mark.parametrize("frames", [
    [b"peer", b"k", b"1", b"2", b""],
    [b"peer", b"k", b"1", b"2", b"H:1", b"body"],
    [b"peer", b"k", b"one", b"2", b"", b"body"],
])
def test_delivery_garbage(frames):
    with pytest.raises(DecodeError):
        wire.decode_delivery(frames)


def test_unknown_header_frames_are_ignored():
    assert wire.parse_headers([b"X-NEW:1", b"\xff\xfe", b"TOPIC:a:b"]) == {"X-NEW": "1",
                                                                           "TOPIC": "a:b"}


def test_consumer_ack_round_trip():
    frames = wire.encode_consumer_ack(b"peer", b"k", True)
    assert frames == [b"peer", b"k", b"1"]
    assert wire.decode_consumer_ack(frames[1:]) == (b"k", True)
    assert wire.decode_consumer_ack([b"k", b"0"]) == (b"k", False)
    assert wire.decode_consumer_ack([b"k", b"anything"]) == (b"k", False)


def test_an_acks_keys_parsed_at_once_are_each_keys():
    keys = [message_key(b"0a1b2c3d", 7), message_key(b"ffffffff", 2**64 - 1),
            message_key(b"0a1b2c3d", 0), message_key(b"12345678", 0x1234_5678_9abc)]
    assert parse_message_keys(keys) == [parse_message_key(key) for key in keys]
    assert parse_message_keys(keys[:1]) == [(b"0a1b2c3d", 7)]
    one_node = [message_key(b"0a1b2c3d", seq) for seq in (5, 2**64 - 1, 0, 6)]
    assert parse_message_keys(one_node) == [parse_message_key(key) for key in one_node]
    other_last = [*one_node, message_key(b"0a1b2c3e", 9)]  # one node id differs, last
    assert parse_message_keys(other_last) == [parse_message_key(key) for key in other_last]


def test_an_acks_key_numbers_are_each_keys_node_id_and_seq():
    keys = [message_key(b"0a1b2c3d", 7), message_key(b"ffffffff", 2**64 - 1),
            message_key(b"00000000", 0)]
    node_ids, seqs = message_key_numbers(keys)
    assert node_ids == (0x0a1b2c3d, 0xffffffff, 0) and seqs == (7, 2**64 - 1, 0)
    assert message_key_numbers([keys[0], b"0a1b2c3d-000000000000000g"]) is None
    assert [(b"%08x" % node_id, seq) for node_id, seq in zip(node_ids, seqs, strict=True)
            ] == list(map(parse_message_key, keys))


@pytest.mark.parametrize("bad", [b"0a1b2c3d-000000000000000g", b"0a1b2c3d-00000000000000007",
                                 b"0a1b2c3d_0000000000000007", b"", b"0A1B2C3D-0000000000000007",
                                 b"0a1b2c3d-00000000000000 7", b"0a1b2c3d--000000000000007",
                                 b"0a1b2c3d-000000000000007", b"0a1b2c3d-0000000000000007 "])
def test_an_acks_keys_with_one_bad_are_none(bad):
    keys = [message_key(b"0a1b2c3d", 7), bad, message_key(b"0a1b2c3d", 8)]
    assert parse_message_keys(keys) is None
    assert parse_message_keys([bad]) is None
    assert parse_message_keys([bad, *keys[:1]]) is None


def test_keys_that_join_into_the_right_length_are_still_each_checked():
    """A key one byte short beside one a byte long (the joined length right) is no key."""
    key = message_key(b"0a1b2c3d", 7)
    assert parse_message_keys([key[:-1], key[-1:] + key]) is None
    assert parse_message_keys([key[:-1] + b" ", key[:-1]]) is None


def test_a_runs_plain_batch_entries_are_each_messages_entry():
    parts = [b"".join(group_chunks((b"a", b""))), b"".join(group_chunks((b"b" * 300,))),
             b"".join(group_chunks(()))]
    seqs = [0, 2**64 - 1, 0x1234]
    assert cw.plain_batch_entries(b"0a1b2c3d", seqs, parts) == [
        cw.batch_entry(message_key(b"0a1b2c3d", seq), b"".join(group_chunks(())), part)
        for seq, part in zip(seqs, parts, strict=True)]
    assert cw.plain_batch_entries(b"0a1b2c3d", [], []) == []


@pytest.mark.parametrize("frames", [[b"k"], [b"k", b"1", b"x"], [b"", b"1"], [b"k", b""], []])
def test_consumer_ack_garbage(frames):
    with pytest.raises(DecodeError):
        wire.decode_consumer_ack(frames)


def test_monitor_envelopes_for_req_and_dealer():
    assert wire.decode_monitor_request([b"rid", b"", b"monitor"]) == ([b"rid"], b"MONITOR", [])
    assert wire.decode_monitor_request([b"rid", b"STATS"]) == ([b"rid"], b"STATS", [])
    assert wire.decode_monitor_request([b"rid", b"purge Ab-1 "]) == ([b"rid"], b"PURGE", [b"Ab-1"])
    assert wire.decode_monitor_request([b"rid", b""]) == ([b"rid"], b"", [])
    assert wire.encode_monitor_reply([b"rid"], b"text") == [b"rid", b"", b"text"]
    with pytest.raises(DecodeError):
        wire.decode_monitor_request([b"rid"])


def test_consume_with_refused_acks_and_refused_round_trip():
    k1, k2 = b"0000abcd-0000000000000001", b"0000abcd-0000000000000002"
    subscribe = cw.Subscribe("orders", "g", 5, "eu-*", "latest", acked=(k1, k2))
    frames = cw.encode_consume(subscribe)
    assert frames[-2:] == [b"ACK:" + k1, b"ACK:" + k2]
    assert cw.decode_request(frames).subscribe == subscribe
    with pytest.raises(DecodeError, match="ACK:k1'. k1 is not a pzq message key"):
        cw.decode_request([*frames[:-2], b"ACK:k1"])
    refused = cw.encode_refused(b"rid", [b"k1", b"k2"])
    assert refused[0] == b"rid"
    assert cw.decode_node_message(refused[1:]) == cw.NodeMessage(cw.REFUSED, keys=(b"k1", b"k2"))
    for garbage in ([cw.REFUSED], [cw.REFUSED, cw.NACK, b"k"], [cw.ERROR, b"text", b"k"]):
        with pytest.raises(DecodeError):
            cw.decode_node_message(garbage)


@pytest.mark.parametrize("body", [b"", b"x", b"1234567890"])
def test_a_message_of_one_part_without_headers_decodes_as_any(body):
    """(Its shape has a shorter way through decode_produce: the same Produce.)"""
    produce = wire.decode_produce([b"rid", b"m", b"", body], max_body_size=10)
    assert produce == wire.Produce(b"rid", b"m", (), (body,), len(body))
    assert type(produce) is wire.Produce
