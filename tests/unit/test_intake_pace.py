"""While consumers are connected and stored messages wait for them, a wake takes
messages, sent alone or in produce batches (each whole), up to what keeps those stored
and not yet ACKed by a consumer within MOST_AHEAD (at least PACED_INTAKE), before it
delivers; otherwise,
and under --hard-sync, it takes all that waits (up to --batch-size frames). A node's
loop on inproc endpoints (on loopback for --send-dsn, whose consumers are counted by
their connections), driven wake by wake."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.node import intake_part
from pzq.node.device import Device
from pzq.node.intake_part import FAR_AHEAD, MOST_AHEAD, PACED_INTAKE
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.protocol import produce_batches as batches
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.send_endpoint import SendEndpoint
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
def test_produce_batches_are_taken_whole_up_to_the_pace(behind, open_socket, options, paced):
    """25 stored, none ACKed: a wake takes whole batches while those stored and not yet
    ACKed stay within MOST_AHEAD, the one that passes it whole; past it, one a wake."""
    device = behind(*options)
    socket = producer(open_socket, device)
    sent = 8
    send_batches(socket, sent)
    whole = -(-(MOST_AHEAD - BATCH) // BATCH)  # batches until the bound is passed
    assert whole + 1 < sent  # (the bound is reached before all that waits)
    taken = taken_in_one_wake(device)
    assert taken == (whole * BATCH if paced else sent * BATCH)
    if paced:  # past the bound: one batch a wake
        assert taken_in_one_wake(device) == BATCH
        taken += BATCH
    while taken < sent * BATCH:  # the rest in the next wakes
        taken += taken_in_one_wake(device)
    for _ in range(sent):  # each batch answered, every message stored
        assert socket.poll(1000), "a batch without its ACK"
        assert all(ok for ok, _ in batches.decode_batch_ack(socket.recv_multipart()).results)


def send_alone(socket: zmq.Socket, count: int) -> None:
    for number in range(count):
        socket.send_multipart(frames.encode_produce(b"%d" % number, [b"x"], (b"TOPIC:orders",)))


def test_messages_sent_alone_are_taken_a_pace_at_a_time(behind, open_socket):
    """25 stored, none ACKed: a wake takes up to MOST_AHEAD of them unACKed, and past it
    PACED_INTAKE a wake, however far ahead: producers are never held up."""
    device = behind()
    socket = producer(open_socket, device)
    send_alone(socket, MOST_AHEAD + 3 * PACED_INTAKE)
    assert taken_in_one_wake(device) == MOST_AHEAD - BATCH
    assert taken_in_one_wake(device) == PACED_INTAKE
    assert taken_in_one_wake(device) == PACED_INTAKE
    for _ in range(MOST_AHEAD - BATCH + 2 * PACED_INTAKE):  # each one stored, ACKed
        assert socket.poll(1000) and socket.recv_multipart()[1] == b"1"


class GroupConsumer:
    """A named group's consumer on --consume-dsn (protocol 1): ACKs what it took."""

    def __init__(self, open_socket: Sockets, device: Device, window: int = 1000) -> None:
        self.socket = open_socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(device.bound()["consume"])
        self.socket.send_multipart([wire.CONSUME, b"orders", b"g", b"%d" % window,
                                    b"DECLARE:1"])
        self.keys: list[bytes] = []
        while not self.socket.poll(0):  # (its CONSUMING)
            wake(device, 100)
        assert self.socket.recv_multipart()[0] == wire.CONSUMING

    def take(self) -> None:
        while self.socket.poll(0):
            message = self.socket.recv_multipart()
            if message[0] == wire.DELIVER:
                self.keys.append(message[3])

    def ack(self, count: int) -> None:
        keys, self.keys = self.keys[:count], self.keys[count:]
        self.socket.send_multipart([wire.ACK, *keys])


class SendConsumer:
    """A consumer of --send-dsn (the original protocol: a ROUTER, each key ACKed)."""

    def __init__(self, open_socket: Sockets, device: Device) -> None:
        self.socket = open_socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(device.bound()["send"])
        self.keys: list[tuple[bytes, bytes]] = []
        send = next(part for part in device.parts if isinstance(part, SendEndpoint))
        while not send.connections.connected:  # counted from the socket's events
            wake(device, 100)

    def take(self) -> None:
        while self.socket.poll(0):
            peer, key, *_ = self.socket.recv_multipart()
            self.keys.append((peer, key))

    def ack(self, count: int) -> None:
        keys, self.keys = self.keys[:count], self.keys[count:]
        for peer, key in keys:
            self.socket.send_multipart([peer, key, b"1"])


def ahead(device: Device) -> int:
    """Messages stored and not yet ACKed by a consumer: --send-dsn's and the groups'."""
    consume = [part for part in device.parts if isinstance(part, ConsumeEndpoint)]
    counters = device.node.counters
    return counters.stored - counters.acked - sum(
        group.counters.acked for part in consume for group in part.groups.values())


@pytest.mark.parametrize("consumer", [GroupConsumer, SendConsumer], ids=["group", "send-dsn"])
def test_the_pace_follows_what_consumers_acked(open_device, open_socket, consumer,
                                              monkeypatch):
    """Each wake takes what keeps the messages stored and not yet ACKed within
    MOST_AHEAD (at least PACED_INTAKE), counted before the wake; as the consumer ACKs,
    wakes take more again. (The hold past FAR_AHEAD, which a backlog this size could
    meet as the consumer ACKs, is the tests' below: here the pace alone.)"""
    monkeypatch.setattr(intake_part, "FAR_AHEAD", 1 << 30)
    device = open_device(roles=ROLES, tcp=("send",) if consumer is SendConsumer else False)
    socket = producer(open_socket, device)
    send_alone(socket, 1)  # the topic
    while device.node.counters.stored < 1:
        wake(device, 1000)
    reader = consumer(open_socket, device)
    send_alone(socket, 2 * MOST_AHEAD)
    paces, aheads = [], []
    for step in range(100):  # (--send-dsn's window grows as its consumers keep up)
        before, counters = ahead(device), device.node.counters
        stored = counters.stored
        wake(device, 1000)
        paces.append(counters.stored - stored)
        aheads.append(before)
        assert paces[-1] == max(PACED_INTAKE, MOST_AHEAD - before), (step, paces)
        if step > 2 and paces[-1] > PACED_INTAKE:
            break
        send_alone(socket, paces[-1])  # as many waiting again
        reader.take()
        if step >= 2:  # all it took, counted by the next wake (after this one's intake)
            reader.ack(len(reader.keys))
    assert paces[1:3] == [PACED_INTAKE] * 2 and paces[-1] > PACED_INTAKE, (paces, aheads)


def test_without_consumers_a_wake_takes_all_that_waits(open_device, open_socket):
    device = open_device(roles=ROLES)
    socket = producer(open_socket, device)
    send_batches(socket, 1)
    wake(device, 1000)  # the topic is new: its first batch
    assert not any(part.backlogged() for part in device.parts)  # stored, unread
    send_batches(socket, 3)
    assert taken_in_one_wake(device) == 3 * BATCH


def test_a_batch_after_messages_sent_alone_counts_with_them(behind, open_socket):
    """Five sent alone, then batches: the pace counts them all, the batch that passes
    it is taken whole."""
    device = behind()
    socket = producer(open_socket, device)
    send_alone(socket, 5)  # fewer than the pace
    send_batches(socket, 6)
    whole = -(-(MOST_AHEAD - BATCH - 5) // BATCH)
    assert taken_in_one_wake(device) == 5 + whole * BATCH


def intake_of_one_wake(device: Device, timeout_ms: int = 1000) -> int:
    """Messages a wake stored (whatever ACKs deleted in it)."""
    before = device.node.counters.stored
    wake(device, timeout_ms)
    return device.node.counters.stored - before


def test_far_behind_while_consumers_ack_a_paced_wake_waits_for_their_next_ack(
        open_device, open_socket, monkeypatch):
    """Behind by FAR_AHEAD or more while the consumer ACKs: once a wake took its pace,
    the next wakes read no producer until the consumer ACKs again (so a backlog drains:
    a batch a wake would match each of its reads), and no longer than HOLD_S when no
    ACK comes."""
    monkeypatch.setattr(intake_part, "HOLD_S", 30.0)  # (held for the test's asserts)
    device = open_device(roles=ROLES)
    socket = producer(open_socket, device)
    send_batches(socket, 1)  # the topic
    while stored(device) < BATCH:
        wake(device, 1000)
    reader = GroupConsumer(open_socket, device)  # 1 000 credits: holds all, ACKs none
    send_batches(socket, 12)
    while stored(device) < 13 * BATCH:  # ACKs none: no hold, a batch a wake at least
        assert intake_of_one_wake(device) >= BATCH
    assert device.node.counters.stored - BATCH >= FAR_AHEAD
    send_batches(socket, 8)
    reader.take()
    reader.ack(BATCH)  # it goes on: behind by 300, ACKing
    taken = [intake_of_one_wake(device) for _ in range(3)]
    assert taken[-1] == 0 and BATCH in taken[:2], taken  # held once at the floor
    assert intake_of_one_wake(device, 10) == 0  # held still: no ACK came
    reader.take()
    reader.ack(BATCH)
    taken = [intake_of_one_wake(device, 10) for _ in range(3)]
    assert taken == [0, BATCH, 0], taken  # (the ACK's wake, the next takes, held again)
    monkeypatch.setattr(intake_part, "HOLD_S", 0.05)
    reader.take()
    reader.ack(BATCH)
    taken = [intake_of_one_wake(device, 10) for _ in range(3)]
    assert taken == [0, BATCH, 0], taken
    wake(device, 100)  # no ACK: the hold's 50 ms pass
    assert intake_of_one_wake(device, 10) == BATCH


def test_far_behind_a_consumer_slower_than_the_floor_holds_no_producer(
        open_device, open_socket, monkeypatch):
    """Behind by FAR_AHEAD or more, a consumer that ACKs fewer than the intake stores
    between its asks (slower than the floor: the backlog grows anyway) holds no
    producer: a batch a wake, as before."""
    monkeypatch.setattr(intake_part, "HOLD_S", 30.0)  # (a hold would show)
    device = open_device(roles=ROLES)
    socket = producer(open_socket, device)
    send_batches(socket, 13)
    reader = GroupConsumer(open_socket, device, window=5)  # the rest waits for it
    while stored(device) < 13 * BATCH:
        wake(device, 1000)
    send_batches(socket, 6)
    taken = []
    for step in range(6):
        if step % 2 == 0:  # two every other wake, against a batch of 25 a wake
            reader.take()
            reader.ack(2)
        taken.append(intake_of_one_wake(device, 10))
    assert taken == [BATCH] * 6, taken
