"""A wake of plain ACKs whose batch stores nothing sends the next deliveries before its
write (pzq.node.device, ``send_early``), and before the ACKs' own deletes and marks
(``settle``): the consumer has its next batch while those and the write are still to
come; a write that fails then keeps the ACKs' deletes for the next batch, so nothing
is lost and nothing is delivered twice, nor anything ACKed again, whatever consumers
ACK and NACK. A wake that stores messages writes first (a node's loop on inproc
endpoints driven wake by wake, a real store)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import zmq

from pzq.node.device import Device
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.store.batch import Batch, Participant
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
    device = open_device(roles=("receive", "send", "consume", "monitor"))  # (none on its default)
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


def test_the_next_batch_goes_out_before_the_acks_deletes_and_marks(
        drained: tuple[Device, zmq.Socket, list[bytes]], monkeypatch: pytest.MonkeyPatch):
    device, consumer, bodies = drained
    endpoint = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    (deliveries,) = endpoint.groups.values()
    area = deliveries.state.area
    deletes = area.delete_all
    seen: list[tuple[bool, int]] = []  # at the ACK's deletes: the batch sent, in flight

    def watched(batch: Batch, seqs: list[int], sizes: list[int],
                ascending: bool = False) -> list[bool]:
        seen.append((consumer.poll(200) != 0, len(deliveries.state.inflight)))
        return deletes(batch, seqs, sizes, ascending)
    monkeypatch.setattr(area, "delete_all", watched)  # (the area's own, watched)
    try:
        first = received(device, consumer, wire.BATCH)
        ack(consumer, first)
        wake(device, 1_000)  # the ACK's wake: its in-flight take, the next batch, the rest
        assert seen == [(True, 100)]  # the next 100 out, the ACKed 100 not in flight
        assert device.node.store.messages == len(bodies) - len(first.entries)
        assert deliveries.counters.acked == 100
    finally:
        consumer.close(0)


class Answering:
    """Consumers of group g that answer what they get at random, and what came."""

    def __init__(self, consumers: list[zmq.Socket], rng: random.Random) -> None:
        self.consumers, self.rng = consumers, rng
        self.held: list[list[bytes]] = [[] for _ in consumers]  # had, not answered
        self.nacked: list[bytes] = []
        self.acked: set[bytes] = set()
        self.delivered: dict[bytes, bytes] = {}  # key: body

    def read_all(self) -> None:
        for consumer, keys in zip(self.consumers, self.held, strict=True):
            while consumer.poll(0):
                message = wire.decode_node_message(consumer.recv_multipart())
                assert message.verb == wire.BATCH, message
                for key, _, parts in message.entries:
                    assert key not in self.acked, f"{key!r} delivered again after its ACK"
                    self.delivered[key] = parts[0]
                    keys.append(key)

    def send(self, at: int, verb: bytes, keys: list[bytes], delay_ms: int = 0) -> None:
        self.consumers[at].send_multipart(wire.encode_keys(verb, keys, delay_ms, protocol=2))
        if verb == wire.ACK:
            self.acked.update(keys)

    def answer_some(self) -> None:
        """One consumer ACKs (with some keys NACKed before, given back and maybe not out
        again yet) or NACKs (at once or with a delay) some of what it has."""
        rng = self.rng
        at = rng.randrange(len(self.consumers))
        keys = self.held[at]
        if not keys:
            return
        chosen = rng.sample(keys, rng.randint(1, len(keys)))
        if rng.random() < 0.5:
            chosen.sort(key=keys.index)  # as received (a consumer's ack_many)
        for key in chosen:
            keys.remove(key)
        if rng.random() < 0.65:
            self.send(at, wire.ACK, chosen + rng.sample(self.nacked, min(
                len(self.nacked), rng.randint(0, 3))))
        else:
            self.send(at, wire.NACK, chosen, rng.choice((0, 0, 30)))
            self.nacked.extend(chosen)

    def ack_all(self) -> None:
        for at, keys in enumerate(self.held):
            if keys:
                self.send(at, wire.ACK, keys)
                keys.clear()


@pytest.mark.parametrize("seed", range(4))
def test_nothing_acked_comes_again_and_nothing_is_lost(
        open_device: Callable[..., Device], context: zmq.Context, seed: int):
    """Two consumers ACK (in bulk or a few keys, in order or not) and NACK (at once or
    after a delay, then ACKing some of those too) at random, a write failing now and
    then: no message comes again once ACKed, and every one is delivered."""
    rng = random.Random(seed)
    device = open_device(roles=("receive", "send", "consume", "monitor"))  # (none on its default)
    store = device.node.store
    consumers = [dealer(context, device.bound()["consume"]) for _ in range(2)]
    fail = FailNext()
    store.register(fail)
    answering = Answering(consumers, rng)
    try:
        for consumer in consumers:
            consumer.send_multipart(wire.encode_consume(wire.Subscribe(
                "t", "g", 50, declare=True, protocol=2)))
            received(device, consumer, wire.CONSUMING)
        bodies = [b"m%03d" % i for i in range(300)]
        produce(device, context, bodies)
        for _ in range(150):
            wake(device, 20)
            answering.read_all()
            answering.answer_some()
            fail.armed = rng.random() < 0.25
        fail.armed = False

        def drained() -> bool:
            answering.read_all()
            answering.ack_all()
            return store.messages == 0
        wake_until(device, drained, "every message ACKed and deleted")
        for _ in range(5):
            wake(device, 20)
        answering.read_all()
        assert answering.held == [[], []]
    finally:
        for consumer in consumers:
            consumer.close(0)
    assert sorted(answering.delivered.values()) == bodies  # each delivered, none lost
