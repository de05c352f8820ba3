"""A wake of one producer's message with no consumer connected: ``default``'s endpoint
asks nothing of the answers (no list of states, no ``retire_dead``) unless a state gave
some messages up, and those it gave up are still retired (a node's loop on inproc
endpoints, driven wake by wake)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.node.device import Device
from pzq.protocol import frames
from pzq.serving.send_endpoint import SendEndpoint
from tests.support.devices import wake, wake_until

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
    socket = open_socket(zmq.DEALER)
    socket.connect(device.bound()["receive"])
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
    socket = open_socket(zmq.DEALER)
    socket.connect(device.bound()["receive"])
    calls = counted_retires(device)
    state = endpoint(device).deliveries.state
    produce(device, socket, b"1", b"TTL:1")
    wake_until(device, lambda: device.node.store.messages == 0, "the message's expiry")
    wake(device, 0)
    assert calls  # asked once the state gave the message up ...
    assert not (state.newly_dead or state.newly_dropped)  # ... and retired it
