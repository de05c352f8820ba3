"""The producers' intake asks the socket whether a second message waits (EVENTS) only
on takes where one could: not on the take after one that read one message alone and
found none behind it, in the wake right after. A message that came meanwhile is still
taken (the loop's poll sees it), and the take after a wake that took nothing looks
again."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq import zmqio
from pzq.node.device import Device
from pzq.node.intake_part import IntakePart
from pzq.protocol import frames
from tests.support.devices import producer_socket, wake, wake_until

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


def counted_looks(device: Device, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the intake's read asks whether a second message waits (wrapped)."""
    calls: list[int] = []
    readable = zmqio.readable
    intake = next(part for part in device.parts if isinstance(part, IntakePart)).socket

    def counting(socket: zmqio.AnySocket) -> bool:
        if socket is intake:
            calls.append(1)
        return readable(socket)
    monkeypatch.setattr(zmqio, "readable", counting)
    return calls


def acked(socket: zmq.Socket, count: int, device: Device) -> list[bytes]:
    """The msg ids of ``count`` ACKs, waking the node until they came."""
    ids: list[bytes] = []

    def came() -> bool:
        while socket.poll(0):
            ack = frames.decode_producer_ack(socket.recv_multipart())
            assert ack.ok
            ids.append(ack.msg_id)
        return len(ids) >= count
    wake_until(device, came, f"{count} ACKs")
    return ids


def test_a_producer_at_window_one_is_looked_behind_every_other_take(
        open_device: Callable[..., Device], open_socket: Sockets,
        monkeypatch: pytest.MonkeyPatch):
    device = open_device()
    socket = producer_socket(device, open_socket)
    looks = counted_looks(device, monkeypatch)
    for n in range(20):
        socket.send_multipart(frames.encode_produce(b"%d" % n, [b"x"], ()))
        assert acked(socket, 1, device) == [b"%d" % n]
    assert device.node.store.messages == 20
    assert len(looks) == 10  # (each take's look: 20 before)


def test_a_message_behind_an_unlooked_take_is_taken_by_the_next(
        open_device: Callable[..., Device], open_socket: Sockets,
        monkeypatch: pytest.MonkeyPatch):
    device = open_device()
    socket = producer_socket(device, open_socket)
    socket.send_multipart(frames.encode_produce(b"0", [b"x"], ()))
    assert acked(socket, 1, device) == [b"0"]  # (looked, none behind: the next won't)
    looks = counted_looks(device, monkeypatch)
    for n in (1, 2, 3):
        socket.send_multipart(frames.encode_produce(b"%d" % n, [b"x"], ()))
    wake_until(device, lambda: device.node.store.messages == 2, "the first taken")
    assert looks == []  # the take read one and did not look behind it ...
    assert acked(socket, 3, device) == [b"1", b"2", b"3"]  # ... the next took the rest
    assert looks  # looking again
    assert device.node.store.messages == 4
    for _ in range(3):
        wake(device, 0)
    assert device.node.store.messages == 4


def test_a_take_after_a_wake_without_one_looks_again(
        open_device: Callable[..., Device], open_socket: Sockets):
    """A wake that took nothing from the producers between two takes: the second looks
    behind its first message (and takes all that waits at once)."""
    device = open_device()
    socket = producer_socket(device, open_socket)
    socket.send_multipart(frames.encode_produce(b"0", [b"x"], ()))
    assert acked(socket, 1, device) == [b"0"]
    wake(device, 0)  # (nothing to take)
    for n in (1, 2, 3):
        socket.send_multipart(frames.encode_produce(b"%d" % n, [b"x"], ()))
    wake_until(device, lambda: device.node.store.messages > 1, "a take")
    assert device.node.store.messages == 4
