"""An ACK of just the keys a consumer was last sent, joined as ``ack_many`` sends them,
is known without reading its keys (``ServedConsumer.numbers_if_sent``: the numbers the
read gives, from the run's keys made with its entries); any other ACK is read as it
came. A topic's groups share the run, so each group's ACK costs a compare."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.protocol.message_keys import message_keys
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.holding import ServedConsumer
from pzq.serving.sending import sent_keys
from tests.support.devices import wake, wake_until

pytestmark = pytest.mark.timeout(120)
NODE_ID = b"0a1b2c3d"
ROLES = ("receive", "send", "monitor", "consume")


def ack_frames(keys: list[bytes]) -> list[bytes]:
    return wire.encode_keys(wire.ACK, keys, protocol=2)


def consumer_sent(seqs: list[int], start: int, stop: int) -> ServedConsumer:
    """A consumer given the run of ``seqs``' entries ``start`` to ``stop``."""
    _, acks = wire.plain_batch_run(NODE_ID, seqs, [b"\x00"] * len(seqs))
    consumer = ServedConsumer(b"id", None, 100, 0.0)  # type: ignore[arg-type]
    consumer.sent = sent_keys(acks, start, stop, NODE_ID, seqs[start:stop])
    return consumer


@pytest.mark.parametrize("seed", range(5))
def test_a_runs_keys_are_joined_as_ack_many_joins_them(seed: int):
    rng = random.Random(seed)
    first = rng.choice([0, 1, 255, 1 << 40, (1 << 64) - 300])
    seqs = list(range(first, first + rng.randrange(1, 200)))
    entries, acks = wire.plain_batch_run(NODE_ID, seqs, [b"\x00"] * len(seqs))
    assert acks == ack_frames(message_keys(NODE_ID, seqs))[1]
    assert entries == wire.plain_batch_entries(NODE_ID, seqs, [b"\x00"] * len(seqs))


def test_the_ack_of_what_was_sent_gives_the_read_numbers_and_no_other_does():
    seqs = list(range(1000, 1100))
    keys = message_keys(NODE_ID, seqs)
    consumer = consumer_sent(seqs, 10, 60)  # a piece of the run: its credit's
    sent = ack_frames(keys[10:60])
    assert consumer.numbers_if_sent(sent) == wire.ack_key_numbers(sent, 4)
    assert consumer.numbers_if_sent(sent) is not None
    for other in (ack_frames(keys[10:59]), ack_frames(keys[11:61]),
                  ack_frames([*keys[11:60], keys[10]]),  # (the same keys, reordered)
                  ack_frames([keys[10].upper(), *keys[11:60]]),
                  [wire.NACK, sent[1]], [wire.ACK, *keys[10:60]], [*sent, b""]):
        assert consumer.numbers_if_sent(other) is None, other[:2]
    assert consumer_sent(seqs, 0, 3).numbers_if_sent(ack_frames(keys[:3])) is None
    assert consumer_sent(seqs, 0, 3).sent is None  # (too few for the ACK of many keys)


def join(device: Device, socket: zmq.Socket, group: bytes) -> None:
    socket.connect(device.bound()["consume"])
    socket.send_multipart([wire.CONSUME, b"t", group, b"100", b"START:earliest",
                           b"PROTOCOL:2"])
    wake_until(device, lambda: socket.poll(0) != 0, "CONSUMING")
    assert socket.recv_multipart()[0] == wire.CONSUMING


def produce(device: Device, producer: zmq.Socket, count: int) -> None:
    producer.connect(device.bound()["receive"])
    for n in range(count):
        producer.send_multipart(frames.encode_produce(b"%d" % n, [b"m%d" % n], (b"TOPIC:t",)))
    acked: list[bytes] = []

    def all_acked() -> bool:
        while producer.poll(0):
            acked.append(producer.recv_multipart()[0])
        return len(acked) == count
    wake_until(device, all_acked, "the producer's ACKs")


def test_three_groups_acks_of_their_batches_are_not_read(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """Three groups (a consumer each, protocol 2, a window of 100) drain 300 messages,
    each ACKing each BATCH whole as ack_many does: no ACK's keys are read, and each
    ACK is applied (nothing held). An ACK of another shape (the keys reordered) is
    read, as before."""
    reads: list[int] = []
    read = wire.ack_key_numbers

    def counted(frames_: list[bytes], at_least: int) -> object:
        reads.append(1)
        return read(frames_, at_least)
    monkeypatch.setattr(wire, "ack_key_numbers", counted)
    device = open_device(roles=ROLES)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    consume.topics.topic("t", Now.read().wall_us)
    sockets = [context.socket(zmq.DEALER) for _ in range(4)]
    producer, *consumers = sockets
    try:
        for group, socket in zip((b"a", b"b", b"c"), consumers, strict=True):
            join(device, socket, group)
        produce(device, producer, 300)
        received: list[list[bytes]] = [[], [], []]
        for round_ in range(3):
            for at, socket in enumerate(consumers):
                wake_until(device, lambda s=socket: s.poll(0) != 0, "a BATCH")
                keys = [key for key, _, _ in
                        wire.decode_node_message(socket.recv_multipart()).entries]
                assert len(keys) == 100
                received[at] += keys
                last = round_ == 2 and at == 2  # (its keys in another order)
                socket.send_multipart(ack_frames(keys[::-1] if last else keys))
        for _ in range(5):
            wake(device, 10)
        assert reads == [1]  # the reordered one alone
        assert all(not consumer.held for consumer in consume.consumers.values())
        assert received[0] == received[1] == received[2]
        assert len(set(received[0])) == 300
    finally:
        for socket in sockets:
            socket.close(0)
