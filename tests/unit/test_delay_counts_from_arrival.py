"""A DELAY, a TTL and a NACK's delay count from no sooner than the message (or the
NACK) came: the wake's time is read before its poll and its ticks, and on a loaded
host a message is read tens of ms later than that. The intake reads its clock again
after each chunk it read off the socket, the consume endpoint after a NACK with a
delay: here that clock runs 80 ms ahead of the wake's time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.node.intake_part import IntakePart
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.protocol.time_headers import message_times
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.store import record
from pzq.store.keyspace import OWN_PREFIX
from tests.support.devices import wake_until

pytestmark = pytest.mark.timeout(30)

AHEAD_US = 80_000  # the clock past the wake's time, as a busy loop's take finds it
DELAY_US = 1_000_000
ROLES = ("receive", "send", "monitor", "consume")


def wake_at(device: Device, now: Now, done: Callable[[], bool], what: str) -> None:
    """Wakes whose time is ``now`` (read long before), until ``done``."""
    for _ in range(100):
        poller = zmq.Poller()
        for polled in device.polled():
            poller.register(polled, zmq.POLLIN)
        device.interest(poller, now)
        device.wake(dict(poller.poll(20)), now)
        if done():
            return
    raise AssertionError(f"not within 100 wakes: {what}")


def ahead_of(now: Now) -> Callable[[], int]:
    return lambda: now.wall_us + AHEAD_US


def test_a_delay_and_a_ttl_count_from_the_clock_read_after_the_message_came(
        open_device: Callable[..., Device], context: zmq.Context):
    device = open_device()
    node = device.node
    intake = next(part for part in device.parts if isinstance(part, IntakePart)).intake
    producer = context.socket(zmq.DEALER)
    try:
        producer.connect(device.bound()["receive"])
        now = Now.read()
        intake.clock = ahead_of(now)
        producer.send_multipart(frames.encode_produce(
            b"d", [b"x"], (b"TOPIC:t", b"DELAY:1000")))
        wake_at(device, now, lambda: node.scheduled.waiting == 1, "the delayed message")
        assert node.scheduled.next_due_us("t") == now.wall_us + AHEAD_US + DELAY_US
        # a TTL from the same time, the record's stored time (from which the node
        # reads the TTL again: the expiry, the release) too
        producer.send_multipart(frames.encode_produce(b"e", [b"y"], (b"TOPIC:t", b"TTL:5000")))
        wake_at(device, now, lambda: node.store.messages == 1, "the expiring message")
        value = next(value for _, value in node.store.iterate(OWN_PREFIX))
        stored_us = record.stored_us_of(value)
        assert stored_us == now.wall_us + AHEAD_US
        assert message_times(record.headers_of(value), stored_us).expires_us \
            == now.wall_us + AHEAD_US + 5_000_000
    finally:
        producer.close(0)


def test_a_wake_time_later_than_the_clock_is_kept(
        open_device: Callable[..., Device], context: zmq.Context):
    """(The times of a take never go back: a clock read behind the wake's is not used.)"""
    device = open_device()
    intake = next(part for part in device.parts if isinstance(part, IntakePart)).intake
    producer = context.socket(zmq.DEALER)
    try:
        producer.connect(device.bound()["receive"])
        now = Now.read()
        intake.clock = lambda: now.wall_us - AHEAD_US
        producer.send_multipart(frames.encode_produce(
            b"d", [b"x"], (b"TOPIC:t", b"DELAY:1000")))
        wake_at(device, now, lambda: device.node.scheduled.waiting == 1, "the message")
        assert device.node.scheduled.next_due_us("t") == now.wall_us + DELAY_US
    finally:
        producer.close(0)


def test_a_nacks_delay_counts_from_the_clock_read_after_the_nack_came(
        open_device: Callable[..., Device], context: zmq.Context):
    device = open_device(roles=ROLES)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    consume.topics.topic("t", Now.read().wall_us)
    producer, consumer = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
    try:
        producer.connect(device.bound()["receive"])
        consumer.connect(device.bound()["consume"])
        consumer.send_multipart([wire.CONSUME, b"t", b"g", b"10", b"START:earliest",
                                 b"PROTOCOL:2"])
        wake_until(device, lambda: consumer.poll(0) != 0, "CONSUMING")
        assert consumer.recv_multipart()[0] == wire.CONSUMING
        producer.send_multipart(frames.encode_produce(b"m", [b"x"], (b"TOPIC:t",)))
        wake_until(device, lambda: consumer.poll(0) != 0, "the delivery")
        [(key, _, _)] = wire.decode_node_message(consumer.recv_multipart()).entries
        now = Now.read()
        consume.clock = ahead_of(now)
        state = next(iter(consume.groups.values())).state
        consumer.send_multipart([wire.NACK, b"DELAY:1000", key])
        wake_at(device, now, lambda: state.delayed.next_due_us() is not None, "the NACK")
        assert state.delayed.next_due_us() == now.wall_us + AHEAD_US + DELAY_US
    finally:
        producer.close(0)
        consumer.close(0)
