"""Produce, deliver, ACK, give back and restart through a real node in this process
(tests.support.inproc: the daemon's own loop and store, endpoints on ``inproc://``).
The same flows run against daemons in test_flow.py and test_groups.py; here each
takes milliseconds and no port."""

from __future__ import annotations

import time
import warnings

import pytest
import zmq

from pzq.client import Consumer, GroupConsumer, Producer
from tests.support.inproc import InprocNode

pytestmark = pytest.mark.timeout(30)

FAST = ("--ack-timeout", "30s", "--reaper-frequency", "100ms")
LATE_AT_MOST = 0.25  # s a delayed delivery may come after its time (a loaded machine)


def produce(node: InprocNode, context, bodies: list[bytes], topic: str = "orders") -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for body in bodies:
            producer.send([body], topic=topic)
        assert all(ack.ok for ack in producer.flush(10))


def test_produce_consume_ack_round_trip(start_inproc_node, context):
    node = start_inproc_node(*FAST)
    bodies = [b"m%d" % n for n in range(100)]
    produce(node, context, bodies)
    assert node.stats()["messages"] == 100
    with Consumer(node.send_dsn, context=context) as consumer:
        got = []
        for _ in bodies:
            message = consumer.receive(10)
            assert message is not None, f"only {len(got)} of {len(bodies)} delivered"
            got.append(message.parts[0])
            message.ack()
        assert got == bodies  # first deliveries in arrival order
    stats = node.wait_stats(lambda s: s["messages"] == 0, message="every ACK applied")
    assert stats["acked"] == 100
    assert stats["producer_acks"] == {"ok": 100, "failed": 0, "replication_failed": 0}


def test_a_group_drains_its_topic_and_the_store_empties(start_inproc_node, context):
    node = start_inproc_node(*FAST)
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders billing",
                    "REMOVE GROUP orders default"):  # billing alone holds what comes
        assert not node.ask(command).startswith("ERROR"), command
    bodies = [b"m%d" % n for n in range(50)]
    produce(node, context, bodies)
    assert node.stats()["topics"]["orders"]["groups"]["billing"]["backlog"] == 50
    with GroupConsumer(node.consume_dsn, "orders", "billing", window=20,
                       context=context) as billing:
        got = []
        while len(got) < len(bodies):
            batch = billing.receive_many(20, 10)
            assert batch, f"only {len(got)} of {len(bodies)} delivered"
            billing.ack_many(batch)
            got += [message.parts[0] for message in batch]
        assert got == bodies
        assert billing.receive(0.2) is None  # nothing twice
    stats = node.wait_stats(lambda s: s["messages"] == 0, message="the group's ACKs applied")
    assert stats["topics"]["orders"]["groups"]["billing"]["acked"] == 50


def test_a_nacked_delivery_comes_again_before_newer_ones(start_inproc_node, context):
    node = start_inproc_node(*FAST, "--delivery-headers")
    produce(node, context, [b"first", b"second"])
    with GroupConsumer(node.consume_dsn, "orders", "g", window=1, context=context) as g:
        taken = g.receive(10)
        assert taken is not None and taken.parts == (b"first",)
        assert g.receive(0.2) is None  # window 1: nothing more while it is out
        taken.nack()
        again = g.receive(10)
        assert again is not None and again.key == taken.key
        assert (again.parts, again.deliveries) == ((b"first",), 2)
        again.ack()
        last = g.receive(10)
        assert last is not None and last.parts == (b"second",)
        last.ack()
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 2,
                    message="both ACKs applied")


def test_unacked_messages_survive_a_stop_and_a_start(start_inproc_node, context):
    node = start_inproc_node(*FAST)
    produce(node, context, [b"m%d" % n for n in range(5)])
    with Consumer(node.send_dsn, context=context) as consumer:
        held = [consumer.receive(10) for _ in range(2)]
        assert all(message is not None for message in held)
        node.restart()  # the graceful stop: nothing ACKed, so all five stay stored
    assert node.stats()["messages"] == 5
    with Consumer(node.send_dsn, context=context) as consumer:
        got = sorted(consumer.receive(10).parts[0] for _ in range(5))
    assert got == [b"m%d" % n for n in range(5)]


def test_consumer_with_topic_and_group_is_a_deprecated_group_consumer(start_inproc_node,
                                                                      context):
    """``Consumer(dsn, topic=..., group=...)`` still makes a GroupConsumer for a release,
    saying what to write instead; a Consumer of --send-dsn says nothing."""
    node = start_inproc_node(*FAST)
    produce(node, context, [b"m0"])
    with pytest.warns(DeprecationWarning, match=r"use GroupConsumer\(dsn, topic, group"):
        consumer = Consumer(node.consume_dsn, topic="orders", group="billing",
                            declare=True, context=context)
    with consumer:
        assert type(consumer) is GroupConsumer
        message = consumer.receive(10)
        assert message is not None and message.parts == (b"m0",)
        message.ack()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Consumer(node.send_dsn, context=context) as plain:
            assert type(plain) is Consumer


@pytest.mark.parametrize("delay", [0.3, 1.0])
def test_a_delayed_nack_comes_again_when_its_delay_ends(start_inproc_node, context, delay):
    """The delay's end is a deadline of the loop: the message goes again right then,
    not at the reaper's next run (a 2 s delay came back after 4.38 s)."""
    node = start_inproc_node("--ack-timeout", "30s", "--reaper-frequency", "60s",
                             "--delivery-headers")  # the reaper does not bring it back
    produce(node, context, [b"later"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        first = consumer.receive(10)
        assert first is not None
        given_back = time.time_ns() // 1000
        consumer.nack(first, delay=delay)
        again = consumer.receive(delay + 5)
        assert again is not None and (again.parts, again.deliveries) == ((b"later",), 2)
        waited_us = again.sent_us - given_back
        assert delay * 1e6 <= waited_us <= (delay + LATE_AT_MOST) * 1e6, waited_us
        again.ack()


def test_acks_sent_just_before_the_consumer_left_are_applied(start_inproc_node):
    """With no consumer connected the send socket is left out of the poll; the ACKs a
    consumer sent just before it went are still read (over TCP, where connections are
    counted), and a consumer that comes later is served."""
    node = start_inproc_node(*FAST, tcp=True)
    with zmq.Context() as context:
        for round_trip in range(2):  # the second: messages come while none is connected
            produce(node, context, [b"m%d" % n for n in range(5)])
            with Consumer(node.send_dsn, context=context) as consumer:
                for _ in range(5):
                    message = consumer.receive(10)
                    assert message is not None, f"round {round_trip}: not delivered"
                    message.ack()
            node.wait_figures(lambda f: f["messages"] == 0,
                              message=f"round {round_trip}: its acks applied")
            # until the node has seen it go, the consumer's connection is one that a
            # delivery may still be handed to (and then comes again only at its ack
            # timeout): the next round's messages come once none is connected
            node.wait_figures(lambda f: f["consumers_connected"] == 0,
                              message=f"round {round_trip}: its consumer gone")
