"""While consumers are connected and stored messages wait for them, a wake takes one
produce batch (or PACED_INTAKE messages sent alone) before it delivers; otherwise, and
under --hard-sync, it takes all that waits (up to --batch-size frames). A node's loop
on inproc endpoints, driven wake by wake."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.node.device import Device
from pzq.node.intake_part import PACED_INTAKE
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.protocol import produce_batches as batches
from pzq.serving.consume_endpoint import ConsumeEndpoint
from tests.support.devices import wake

pytestmark = pytest.mark.timeout(30)
ROLES = ("receive", "send", "monitor", "consume")
BATCH = 25  # messages in each produce batch sent here


Sockets = Callable[[int], zmq.Socket]  # tests/conftest.py's open_socket: closed after


def producer(open_socket: Sockets, device: Device) -> zmq.Socket:
    socket = open_socket(zmq.DEALER)
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


def taken_in_one_wake(device: Device) -> int:
    before = stored(device)
    wake(device, 1000)
    return stored(device) - before


@pytest.fixture
def behind(open_device: Callable[..., Device], open_socket: Sockets
           ) -> Callable[..., Device]:
    """A device whose group consumer (5 credits) holds its 5 of 25 stored messages."""
    def make(*options: str) -> Device:
        device = open_device(*options, roles=ROLES)
        send_batches(producer(open_socket, device), 1)
        while stored(device) < BATCH:
            wake(device, 1000)
        consumer = open_socket(zmq.DEALER)
        consumer.setsockopt(zmq.LINGER, 0)
        consumer.connect(device.bound()["consume"])
        consumer.send_multipart([wire.CONSUME, b"orders", b"g", b"5", b"DECLARE:1"])
        consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
        while not any(len(group.state.inflight) == 5 for group in consume.groups.values()):
            wake(device, 1000)
        assert any(part.backlogged() for part in device.parts)
        return device
    return make


@pytest.mark.parametrize("options, paced", [((), True), (("--hard-sync",), False)],
                         ids=["paced", "hard-sync"])
def test_a_wake_takes_one_batch_while_consumers_are_behind(behind, open_socket, options,
                                                            paced):
    device = behind(*options)
    socket = producer(open_socket, device)
    send_batches(socket, 3)
    taken = taken_in_one_wake(device)
    assert taken == (BATCH if paced else 3 * BATCH)
    while taken < 3 * BATCH:  # the rest in the next wakes
        taken += taken_in_one_wake(device)
    for _ in range(3):  # each batch answered, every message stored
        assert socket.poll(1000), "a batch without its ACK"
        assert all(ok for ok, _ in batches.decode_batch_ack(socket.recv_multipart()).results)


def test_messages_sent_alone_are_taken_a_pace_at_a_time(behind, open_socket):
    device = behind()
    socket = producer(open_socket, device)
    for number in range(3 * PACED_INTAKE):
        socket.send_multipart(frames.encode_produce(b"%d" % number, [b"x"], (b"TOPIC:orders",)))
    assert taken_in_one_wake(device) == PACED_INTAKE


def test_without_consumers_a_wake_takes_all_that_waits(open_device, open_socket):
    device = open_device(roles=ROLES)
    socket = producer(open_socket, device)
    send_batches(socket, 1)
    wake(device, 1000)  # the topic is new: its first batch
    assert not any(part.backlogged() for part in device.parts)  # stored, unread
    send_batches(socket, 3)
    assert taken_in_one_wake(device) == 3 * BATCH


def test_a_batch_after_messages_sent_alone_ends_the_wake(behind, open_socket):
    device = behind()
    socket = producer(open_socket, device)
    for number in range(5):  # fewer than the pace
        socket.send_multipart(frames.encode_produce(b"%d" % number, [b"x"], (b"TOPIC:orders",)))
    send_batches(socket, 3)
    assert taken_in_one_wake(device) == 5 + BATCH
