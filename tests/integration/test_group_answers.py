"""What a group consumer can answer besides ACK and NACK, on real nodes in this process
(tests.support.inproc, on loopback ports of their own): still working (WORKING), give
up now (REJECT), give back for later (NACK with DELAY), confirmed ACKs (CONFIRM:1); and
a consumer that declares its topic, takes many, iterates."""

from __future__ import annotations

import re
import time

import pytest
import zmq

from pzq.client import Consumer, ConsumeRefused, GroupConsumer, Producer
from pzq.protocol import consume as wire
from pzq.protocol.message_keys import message_key, parse_message_key
from tests.integration.test_groups import drain, produce

pytestmark = pytest.mark.timeout(60)
QUICK = ("--ack-timeout", "2s", "--reaper-frequency", "100ms", "--delivery-headers")


@pytest.fixture
def node(start_inproc_node):
    return start_inproc_node(*QUICK, tcp=True)


def group_figures(node, name: str = "g") -> dict:
    return node.stats()["topics"]["orders"]["groups"][name]


def test_working_keeps_a_delivery_past_its_deadline(node, context):
    produce(node, context, [b"long job"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as busy:
        job = busy.receive(10)  # the job is busy's before another consumer joins
        assert job is not None
        with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as other:
            started = time.monotonic()
            while time.monotonic() - started < 5:  # 2.5 ack timeouts of work
                busy.working(job)
                assert other.receive(0.5) is None, "the job went to another while at work"
        busy.ack(job)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 1)
        assert group_figures(node)["expired"] == 0


def test_reject_gives_a_message_up_at_once(node, context):
    produce(node, context, [b"poison", b"fine"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        poison = consumer.receive(10)
        consumer.reject(poison)
        assert drain(consumer, 1) == [b"fine"]
        assert consumer.receive(0.5) is None  # the rejected one does not come again
    assert group_figures(node)["dead_lettered"] == 1


def test_a_nack_with_a_delay_holds_the_message_back(node, context):
    produce(node, context, [b"later"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        first = consumer.receive(10)
        given_back = time.time_ns() // 1000
        consumer.nack(first, delay=1.0)
        assert consumer.receive(0.5) is None
        again = consumer.receive(10)
        assert again.parts == first.parts and again.deliveries == 2
        assert again.sent_us - given_back >= 1_000_000


def test_a_sync_message_answers_as_the_asyncio_one_does(node, context):
    """message.nack(delay=), message.working(), message.reject() and
    nack_many(delay=), as pzq.aio has them; a bad delay is refused before sending."""
    produce(node, context, [b"a", b"b", b"c", b"d"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        a, b, c, d = (consumer.receive(10) for _ in range(4))
        for bad in (-1, 604_801, "soon"):
            with pytest.raises(ValueError, match="delay must be from 0 to 604800 s"):
                a.nack(delay=bad)
            with pytest.raises(ValueError, match="delay must be from 0 to 604800 s"):
                consumer.nack_many([b, c], delay=bad)
        given_back = time.time_ns() // 1000
        a.nack(delay=1.0)
        consumer.nack_many([b], delay=1.0)
        c.working()
        d.reject()
        assert consumer.receive(0.5) is None  # a and b held back, d gone, c still out
        again = drain(consumer, 2, ack=False)
        assert sorted(again) == [b"a", b"b"]
        assert time.time_ns() // 1000 - given_back >= 1_000_000
        c.ack()
        consumer.nack_many([])  # nothing to give back: nothing sent
    figures = group_figures(node)
    assert figures["dead_lettered"] == 1 and consumer.errors == []


def test_a_send_dsn_message_refuses_what_its_protocol_lacks(node, context):
    with Producer(node.receive_dsn, context=context) as producer:
        producer.send([b"plain"])  # no topic: --send-dsn's
        assert all(ack.ok for ack in producer.flush(15))
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None and message.parts == (b"plain",)
        for answer, verb in ((message.working, "working()"), (message.reject, "reject()"),
                             (lambda: message.nack(delay=1.0), "a NACK with a delay")):
            with pytest.raises(ValueError, match=rf"^{re.escape(verb)} is a group consumer's"):
                answer()
        message.nack()
        again = consumer.receive(10)
        assert again is not None and again.key == message.key
        again.ack()


def test_a_confirmed_ack_is_written_when_it_returns(node, context):
    produce(node, context, [b"m%d" % n for n in range(10)])
    with GroupConsumer(node.consume_dsn, "orders", "g", window=5, confirm=True,
                       context=context) as consumer:
        first = consumer.receive_many(5, 10)
        assert 1 <= len(first) <= 5
        consumer.ack_confirmed(first)  # credits come back: more arrive while it waits
        assert group_figures(node)["acked"] == len(first)
        rest = []
        while len(first) + len(rest) < 10:
            more = consumer.receive_many(10, 10)
            assert more, "the credits given back by the confirmed ACKs brought no more"
            consumer.ack_confirmed(more)
            rest += more
    assert sorted(m.parts[0] for m in first + rest) == [b"m%d" % n for n in range(10)]
    assert group_figures(node)["backlog"] == 0


def test_a_confirmed_ack_names_only_the_keys_it_took(node, context):
    """An ACK stops at a key that is no key (ERROR): ACKED names the keys before it,
    not the refused one nor those after it, which are still out."""
    produce(node, context, [b"a", b"b"])
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(node.consume_dsn)
        socket.send_multipart([wire.CONSUME, b"orders", b"g", b"5", b"CONFIRM:1"])
        keys = []
        while len(keys) < 2:
            assert socket.poll(10_000)
            message = wire.decode_node_message(socket.recv_multipart())
            if message.verb == wire.DELIVER:
                keys.append(message.key)
        socket.send_multipart([wire.ACK, keys[0], b"bogus", keys[1]])
        answers = []
        while len(answers) < 2:
            assert socket.poll(10_000)
            answers.append(socket.recv_multipart())
        figures = group_figures(node)  # (while connected: its deliveries are held)
    finally:
        socket.close()
    assert answers == [[wire.ERROR, b"bogus is not a pzq message key"],
                       [wire.ACKED, keys[0]]]
    assert (figures["acked"], figures["inflight"]) == (1, 1)  # the second is still out


def test_an_ack_of_a_message_never_delivered_leaves_it_to_be_delivered(node, context):
    """A Redis user's XACK of an id the group never read changes nothing: pzq's ACK of
    a stored message no consumer of the group has had yet is an unknown ACK (answered
    ACKED as any written ACK is, counted in unknown_acks), and the message is
    delivered in its turn, not lost."""
    produce(node, context, [b"a"])
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)

    def next_answer() -> wire.NodeMessage:
        assert socket.poll(10_000), "no answer from the node"
        return wire.decode_node_message(socket.recv_multipart())

    try:
        socket.connect(node.consume_dsn)
        socket.send_multipart([wire.CONSUME, b"orders", b"g", b"1", b"CONFIRM:1"])
        assert next_answer().verb == wire.CONSUMING
        first = next_answer()
        assert (first.verb, first.parts) == (wire.DELIVER, (b"a",))
        produce(node, context, [b"b", b"c"])
        node_id, seq = parse_message_key(first.key)
        never_delivered = message_key(node_id, seq + 2)  # c's: the window holds a
        socket.send_multipart([wire.ACK, never_delivered])
        assert next_answer().keys == (never_delivered,)
        assert (group_figures(node)["unknown_acks"], group_figures(node)["backlog"]) == (1, 3)
        got = []
        key = first.key
        while len(got) < 2:
            socket.send_multipart([wire.ACK, key])
            answer = next_answer()
            while answer.verb != wire.DELIVER:
                answer = next_answer()
            got.append(answer.parts[0])
            key = answer.key
        assert got == [b"b", b"c"] and key == never_delivered
    finally:
        socket.close()


def test_a_consumer_declares_its_topic_and_iterates(node, context):
    with pytest.raises(ConsumeRefused, match="no topic 'fresh'"):
        GroupConsumer(node.consume_dsn, "fresh", "g", context=context)
    with GroupConsumer(node.consume_dsn, "fresh", "g", declare=True,
                       context=context) as consumer:
        produce(node, context, [b"a", b"b"], topic="fresh")
        got = []
        for message in consumer:
            got.append(message.parts[0])
            message.ack()
            if len(got) == 2:
                break
    assert got == [b"a", b"b"]


@pytest.mark.parametrize("frames, error", [
    ([wire.NACK, b"DELAY:soon", b"k"], "is not DELAY:<milliseconds"),
    ([wire.WORKING], "WORKING needs at least one key frame"),
    ([wire.REJECT, b"not-a-key"], "not-a-key is not a pzq message key"),
])
def test_bad_answers_get_one_clear_error(node, context, frames, error):
    produce(node, context, [b"x"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        consumer._socket.send_multipart(frames)  # as a client of one's own might
        consumer.receive(1)
        deadline = time.monotonic() + 10
        while not consumer.errors and time.monotonic() < deadline:
            consumer.receive(0.1)
        assert consumer.errors and error in consumer.errors[0], consumer.errors


def test_bad_consume_options_are_refused(node, context):
    socket = context.socket(zmq.DEALER)
    try:
        socket.connect(node.consume_dsn)
        socket.send_multipart([wire.CONSUME, b"orders", b"g", b"5", b"CONFIRM:2"])
        assert socket.poll(10_000)
        answer = wire.decode_node_message(socket.recv_multipart())
    finally:
        socket.close(0)
    assert answer.verb == wire.ERROR and "CONFIRM:0|1 or DECLARE:0|1" in answer.error


def test_a_delivery_of_another_group_is_refused_not_answered_in_its_place(node, context):
    """A key names a message, not a delivery: billing's ACK of audit's delivery would
    ACK billing's own delivery of the same message and leave audit's out. The consumer
    refuses a delivery it did not receive, before anything is sent."""
    produce(node, context, [b"order"])
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing, \
            GroupConsumer(node.consume_dsn, "orders", "audit", context=context) as audit:
        mine, theirs = billing.receive(10), audit.receive(10)
        assert mine.key == theirs.key
        for answer in (lambda: billing.ack(theirs), lambda: billing.ack_many([mine, theirs]),
                       lambda: billing.nack(theirs), lambda: billing.working(theirs),
                       lambda: billing.reject(theirs)):
            with pytest.raises(ValueError, match="received by another consumer"):
                answer()
        mine.nack()  # after the refused answers on billing's connection: still out
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["nacked"] == 1,
                        message="billing's own delivery given back, not ACKed before")
        theirs.ack()
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["audit"]["acked"] == 1)
        assert group_figures(node, "billing")["acked"] == 0
