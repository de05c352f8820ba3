"""A wake of plain ACKs whose batch stores nothing sends the next deliveries before its
write (pzq.node.device, ``send_early``): the consumer has its next batch while the
write is still to come; a write that fails then keeps the ACKs' deletes for the next
batch, so nothing is lost and nothing is delivered twice. A wake that stores messages
writes first (a node's loop on inproc endpoints driven wake by wake, a real store)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.node.device import Device
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.store.batch import Participant
from tests.support.devices import wake, wake_until
from tests.support.stored import FailNext

pytestmark = pytest.mark.timeout(30)


class Looks(Participant):
    """Before each write: whether the consumer's socket has something to read."""

    def __init__(self, consumer: zmq.Socket) -> None:
        self.consumer = consumer
        self.seen: list[bool] = []

    def before_write(self) -> None:
        self.seen.append(self.consumer.poll(200) != 0)


def dealer(context: zmq.Context, endpoint: str) -> zmq.Socket:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


def received(device: Device, consumer: zmq.Socket, verb: bytes) -> wire.NodeMessage:
    wake_until(device, lambda: consumer.poll(0) != 0, verb.decode())
    message = wire.decode_node_message(consumer.recv_multipart())
    assert message.verb == verb, message
    return message


def produce(device: Device, context: zmq.Context, bodies: list[bytes]) -> None:
    producer = dealer(context, device.bound()["receive"])
    try:
        for i, body in enumerate(bodies):
            producer.send_multipart(frames.encode_produce(b"%d" % i, [body], (b"TOPIC:t",)))
        acks: list[bool] = []

        def all_acked() -> bool:
            while producer.poll(0):
                acks.append(frames.decode_producer_ack(producer.recv_multipart()).ok)
            return len(acks) == len(bodies)
        wake_until(device, all_acked, "the producer's ACKs")
        assert all(acks)
    finally:
        producer.close(0)


@pytest.fixture
def drained(open_device: Callable[..., Device],
            context: zmq.Context) -> tuple[Device, zmq.Socket, list[bytes]]:
    """A node holding 300 messages for group g of topic t, its consumer (protocol 2,
    a window of 100) given the first batch."""
    device = open_device(roles=("receive", "consume"))
    consumer = dealer(context, device.bound()["consume"])
    consumer.send_multipart(wire.encode_consume(wire.Subscribe(
        "t", "g", 100, declare=True, protocol=2)))
    received(device, consumer, wire.CONSUMING)
    bodies = [b"m%03d" % i for i in range(300)]
    produce(device, context, bodies)
    return device, consumer, bodies


def ack(consumer: zmq.Socket, batch: wire.NodeMessage) -> None:
    consumer.send_multipart(wire.encode_keys(wire.ACK, [key for key, _, _ in batch.entries],
                                             protocol=2))


def test_the_next_batch_goes_out_before_the_write_of_the_ack(
        drained: tuple[Device, zmq.Socket, list[bytes]]):
    device, consumer, bodies = drained
    store = device.node.store
    try:
        first = received(device, consumer, wire.BATCH)
        looks = Looks(consumer)
        store.register(looks)
        ack(consumer, first)
        wake(device, 1_000)  # the ACK's wake: the next batch, then the write
        assert looks.seen == [True]
        assert store.messages == len(bodies) - len(first.entries)
    finally:
        consumer.close(0)


def test_a_batch_sent_before_a_failed_write_loses_no_ack(
        drained: tuple[Device, zmq.Socket, list[bytes]]):
    device, consumer, bodies = drained
    store = device.node.store
    try:
        batches = [received(device, consumer, wire.BATCH)]
        looks, fail = Looks(consumer), FailNext()
        store.register(looks)
        store.register(fail)
        fail.armed = True
        ack(consumer, batches[0])
        wake(device, 1_000)  # the ACK's wake: its write fails (the disk is full)
        assert looks.seen == [True] and not fail.armed
        assert store.messages == len(bodies)  # the deletes are owed still
        batches.append(received(device, consumer, wire.BATCH))  # (sent before the write)
        wake_until(device, lambda: store.messages == len(bodies) - 100,
                   "the ACKed messages deleted by the next batch")
        for _ in range(2):
            ack(consumer, batches[-1])
            if len(batches) < 3:
                batches.append(received(device, consumer, wire.BATCH))
        wake_until(device, lambda: store.messages == 0, "every message deleted")
        wake(device, 50)
        assert consumer.poll(0) == 0  # nothing delivered again
    finally:
        consumer.close(0)
    delivered = [parts[0] for batch in batches for _, _, parts in batch.entries]
    assert sorted(delivered) == bodies  # each once, none lost


def test_a_wake_that_stores_messages_writes_before_it_delivers(
        drained: tuple[Device, zmq.Socket, list[bytes]], context: zmq.Context):
    device, consumer, bodies = drained
    store = device.node.store
    producer = dealer(context, device.bound()["receive"])
    try:
        first = received(device, consumer, wire.BATCH)
        looks = Looks(consumer)
        store.register(looks)
        stored_before = store.next_seq
        ack(consumer, first)
        producer.send_multipart(frames.encode_produce(b"x", [b"new"], (b"TOPIC:t",)))
        writes: list[tuple[bool, bool]] = []  # each write: the batch sent, a message stored

        def both_answered() -> bool:
            while len(writes) < len(looks.seen):
                writes.append((looks.seen[len(writes)], store.next_seq > stored_before))
            return producer.poll(0) != 0 and consumer.poll(0) != 0
        wake_until(device, both_answered, "the producer's ACK and the next batch")
        storing = [sent for sent, stored in writes if stored]
        acked_alone = any(sent for sent, stored in writes if not stored)
        # the wake that stored it wrote before it sent (unless the ACK came in a wake
        # of its own before, which sent the batch early)
        assert storing and (not storing[0] or acked_alone)
        assert store.messages == len(bodies) + 1 - 100
    finally:
        producer.close(0)
        consumer.close(0)
