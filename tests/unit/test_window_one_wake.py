"""A wake of one producer's message with no consumer connected: ``default``'s endpoint
asks nothing of the answers (no list of states, no ``retire_dead``) unless a state gave
some messages up, and those it gave up are still retired (a node's loop on inproc
endpoints, driven wake by wake); the message's ACK is sent in one call, and an ACK a
full pipe refuses waits, as before; its batch is the one the last wake wrote."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.counters import Counters
from pzq.node.device import Device
from pzq.node.intake_part import IntakePart
from pzq.node.outbox import ProducerAcks
from pzq.protocol import frames
from pzq.serving.send_endpoint import SendEndpoint
from pzq.store.batch import Batch
from tests.support.devices import producer_socket, wake, wake_until

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


def endpoint(device: Device) -> SendEndpoint:
    return next(part for part in device.parts if isinstance(part, SendEndpoint))


def produce(device: Device, socket: zmq.Socket, msg_id: bytes, *headers: bytes) -> None:
    socket.send_multipart(frames.encode_produce(msg_id, [b"x"], headers))
    wake_until(device, lambda: bool(socket.poll(0)), "the producer's ACK")
    assert frames.decode_producer_ack(socket.recv_multipart()).ok


def counted_retires(device: Device) -> list[int]:
    """How often the send endpoint's answers retire given-up messages (wrapped)."""
    answers, calls = endpoint(device).answers, []
    retire = answers.retire_dead

    def counting(*args: object, **kwargs: object) -> None:
        calls.append(1)
        retire(*args, **kwargs)  # type: ignore[arg-type]
    answers.retire_dead = counting  # type: ignore[method-assign]
    return calls


def test_a_producers_wake_asks_no_retire_of_default(open_device: Callable[..., Device],
                                                    open_socket: Sockets):
    device = open_device()
    socket = producer_socket(device, open_socket)
    calls = counted_retires(device)
    for n in range(20):
        produce(device, socket, b"%d" % n)
    for _ in range(5):
        wake(device, 0)
    assert device.node.store.messages == 20
    assert calls == []


def test_a_message_given_up_without_consumers_is_still_retired(
        open_device: Callable[..., Device], open_socket: Sockets):
    device = open_device()
    socket = producer_socket(device, open_socket)
    calls = counted_retires(device)
    state = endpoint(device).deliveries.state
    produce(device, socket, b"1", b"TTL:1")
    wake_until(device, lambda: device.node.store.messages == 0, "the message's expiry")
    wake(device, 0)
    assert calls  # asked once the state gave the message up ...
    assert not (state.newly_dead or state.newly_dropped)  # ... and retired it


def test_a_producers_wake_sends_its_ack_in_one_call(open_device: Callable[..., Device],
                                                    open_socket: Sockets):
    """The ACK of a wake's one message goes out without the queue of waiting ACKs:
    no ``flush`` of it (nor the queue's tuple), and every ACK is counted as sent."""
    device = open_device()
    socket = producer_socket(device, open_socket)
    acks, flushes = next(part for part in device.parts if isinstance(part, IntakePart)).acks, []
    flush = acks.flush

    def counting() -> bool:
        flushes.append(1)
        return flush()
    acks.flush = counting  # type: ignore[method-assign]
    for n in range(20):
        produce(device, socket, b"%d" % n)
    counters = device.node.counters
    assert (counters.acks_ok, counters.producer_acks_sent, acks.answers) == (20, 20, 0)
    assert flushes == []


def router_acks(open_socket: Sockets) -> tuple[ProducerAcks, Counters, zmq.Socket]:
    """ProducerAcks on a ROUTER as --receive-dsn's (ROUTER_MANDATORY), with a DEALER
    connected as producer ``b"p"`` whose pipe holds few messages."""
    router, dealer = open_socket(zmq.ROUTER), open_socket(zmq.DEALER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.setsockopt(zmq.SNDHWM, 2)
    router.bind("inproc://acks-in-one-call")
    dealer.setsockopt(zmq.ROUTING_ID, b"p")
    dealer.setsockopt(zmq.RCVHWM, 2)
    dealer.connect("inproc://acks-in-one-call")
    dealer.send_multipart([b"hello", b"", b"x"])  # (the router learns the routing id)
    assert router.poll(5000)
    router.recv_multipart()
    counters = Counters()
    return ProducerAcks(router, counters), counters, dealer


def test_an_ack_a_full_pipe_refuses_waits_and_is_sent_later(open_socket: Sockets):
    acks, counters, dealer = router_acks(open_socket)
    sent = 0
    while not acks.answers:  # until the pipe is full: the ACK refused waits
        sent += 1
        assert sent < 10_000
        acks.send_one_ok(b"p", b"%d" % sent)
    for extra in range(sent + 1, sent + 4):  # those after it wait behind it
        acks.send_one_ok(b"p", b"%d" % extra)
    assert acks.answers == 4
    received = []
    while acks.answers:
        while dealer.poll(0):
            received.append(frames.decode_producer_ack(dealer.recv_multipart()))
        acks.flush()
    while len(received) < sent + 3:
        assert dealer.poll(5000)
        received.append(frames.decode_producer_ack(dealer.recv_multipart()))
    # (each sent once: flush sends those after an ACK a full pipe refused, as before)
    assert sorted(ack.msg_id for ack in received) == sorted(b"%d" % n for n in range(1, sent + 4))
    assert all(ack.ok for ack in received)
    assert (counters.acks_ok, counters.producer_acks_sent) == (sent + 3, sent + 3)


def test_an_ack_to_a_producer_gone_is_dropped(open_socket: Sockets):
    acks, counters, _ = router_acks(open_socket)
    acks.send_one_ok(b"gone", b"1")
    assert acks.answers == 0 and not acks.flush()
    assert (counters.acks_ok, counters.producer_acks_dropped,
            counters.producer_acks_sent) == (1, 1, 0)


def test_a_producers_wake_makes_no_batch(open_device: Callable[..., Device],
                                         open_socket: Sockets):
    """Each wake writes into the batch the last one wrote (emptied): one batch, and
    one LevelDB write batch, for 20 producers' wakes."""
    device = open_device()
    socket = producer_socket(device, open_socket)
    produce(device, socket, b"first")
    store, begun = device.node.store, []
    begin = store.begin

    def keeping(now: float | None = None) -> Batch:
        batch = begin(now)
        begun.append(batch)
        return batch
    store.begin = keeping  # type: ignore[method-assign]
    for n in range(20):
        produce(device, socket, b"%d" % n)
    assert store.messages == 21 and len(begun) >= 20
    assert len({id(batch) for batch in begun}) == 1
    assert len({id(batch._batch) for batch in begun}) == 1
