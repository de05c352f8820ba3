"""While consumers are connected and stored messages wait for them, a wake takes one
produce batch (or PACED_INTAKE messages sent alone) before it delivers; otherwise, and
under --hard-sync, it takes all that waits (up to --batch-size frames). A node's loop
on inproc endpoints, driven wake by wake."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.node.device import PACED_INTAKE, Device
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.protocol import produce_batches as batches
from tests.support.devices import wake

pytestmark = pytest.mark.timeout(30)
ROLES = ("receive", "send", "monitor", "consume")
BATCH = 25  # messages in each produce batch sent here


def producer(context: zmq.Context, device: Device) -> zmq.Socket:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(device.bound()["receive"])
    return socket


def send_batches(socket: zmq.Socket, count: int) -> None:
    for number in range(count):
        entries = [batches.encode_entry(b"%d" % n, [b"TOPIC:orders"], [b"body"])
                   for n in range(BATCH)]
        socket.send_multipart(batches.encode_batch(b"b%d" % number, entries))


def stored(device: Device) -> int:
    return device.node.store.messages


def a_consumer_behind(context: zmq.Context, device: Device) -> zmq.Socket:
    """A group consumer with 5 credits, holding its 5 of 20 stored messages."""
    socket = producer(context, device)
    send_batches(socket, 1)
    while stored(device) < BATCH:
        wake(device, 1000)
    consumer = context.socket(zmq.DEALER)
    consumer.setsockopt(zmq.LINGER, 0)
    consumer.connect(device.bound()["consume"])
    consumer.send_multipart([wire.CONSUME, b"orders", b"g", b"5", b"DECLARE:1"])
    while not any(len(group.state.inflight) == 5 for group in device.consume.groups.values()):
        wake(device, 1000)
    socket.close()
    return consumer


@pytest.mark.parametrize("options, paced", [((), True), (("--hard-sync",), False)],
                         ids=["paced", "hard-sync"])
def test_a_wake_takes_one_batch_while_consumers_are_behind(
        open_device: Callable[..., Device], context: zmq.Context, options, paced):
    device = open_device(*options, roles=ROLES)
    consumer = a_consumer_behind(context, device)
    socket = producer(context, device)
    try:
        assert any(part.backlogged() for part in device.parts)
        send_batches(socket, 3)
        before = stored(device)
        wake(device, 1000)
        assert stored(device) - before == (BATCH if paced else 3 * BATCH)
        while stored(device) - before < 3 * BATCH:  # the rest in the next wakes
            wake(device, 1000)
        for _ in range(3):  # each batch answered, every message stored
            assert socket.poll(1000), "a batch without its ACK"
            assert all(ok for ok, _ in batches.decode_batch_ack(socket.recv_multipart()).results)
    finally:
        socket.close()
        consumer.close()


def test_messages_sent_alone_are_taken_a_pace_at_a_time(
        open_device: Callable[..., Device], context: zmq.Context):
    device = open_device(roles=ROLES)
    consumer = a_consumer_behind(context, device)
    socket = producer(context, device)
    try:
        for number in range(3 * PACED_INTAKE):
            socket.send_multipart(frames.encode_produce(b"%d" % number, [b"x"],
                                                        (b"TOPIC:orders",)))
        before = stored(device)
        wake(device, 1000)
        assert stored(device) - before == PACED_INTAKE
    finally:
        socket.close()
        consumer.close()


def test_without_consumers_a_wake_takes_all_that_waits(
        open_device: Callable[..., Device], context: zmq.Context):
    device = open_device(roles=ROLES)
    socket = producer(context, device)
    try:
        send_batches(socket, 1)
        wake(device, 1000)  # the topic is new: its first batch
        assert not any(part.backlogged() for part in device.parts)  # stored, unread
        send_batches(socket, 3)
        before = stored(device)
        wake(device, 1000)
        assert stored(device) - before == 3 * BATCH
    finally:
        socket.close()
