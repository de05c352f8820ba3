"""The Python calls of a wake that takes one producer's message sent alone (window 1,
no consumer): the calls it no longer makes, and what they did still done (a node's
loop on inproc endpoints, driven wake by wake, every Python function it calls
recorded by a profile hook)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.node.intake_part import IntakePart
from pzq.protocol import frames
from tests.support.devices import producer_socket, wake, wake_until

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


def called_in_wake(device: Device, socket: zmq.Socket, msg_id: bytes,
                   *headers: bytes) -> list[str]:
    """The Python functions (``file:name``) a wake that takes the message calls, in
    order; the message is ACKed."""
    socket.send_multipart(frames.encode_produce(msg_id, [b"body"], headers))
    intake = next(part for part in device.parts if isinstance(part, IntakePart))
    assert intake.socket.poll(2000)  # (the message is there for the wake)
    poller = zmq.Poller()
    for polled in device.polled():
        poller.register(polled, zmq.POLLIN)
    now = Now.read()
    device.interest(poller, now)
    device.poll_timeout_ms(now)
    events = dict(poller.poll(0))
    called: list[str] = []

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            called.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}")
    sys.setprofile(hook)
    try:
        device.wake(events, Now.read())
    finally:
        sys.setprofile(None)
    assert socket.poll(2000)
    assert frames.decode_producer_ack(socket.recv_multipart()).ok
    return called


def test_a_wake_of_one_message_makes_only_the_calls_its_message_needs(
        open_device: Callable[..., Device], open_socket: Sockets):
    device = open_device()
    socket = producer_socket(device, open_socket)
    socket.send_multipart(frames.encode_produce(b"0", [b"body"], [b"TOPIC:orders"]))
    wake_until(device, lambda: bool(socket.poll(0)), "the first ACK")  # (topic made)
    socket.recv_multipart()
    for _ in range(3):
        wake(device, 0)
    for n in range(1, 6):
        called = called_in_wake(device, socket, b"%d" % n, b"TOPIC:orders")
        assert "store.py:wake_at" not in called  # the wake's time: given to ``begin``
        assert "parts.py:settle" not in called  # no take left anything to settle
        assert "topic_registry.py:topic" not in called  # a known topic: its dict's
    store, topic = device.node.store, device.node.topics.topics["orders"]
    assert (store.messages, topic.messages, topic.received) == (6, 6, 6)
