"""pzq.zmqio's paths past pyzmq's per-call costs: whether input waits is asked by a poll
of the one socket (no ``SocketOption`` enum made in Python), and a producer's message
on the intake's ROUTER has its routing id received as bytes (no zmq.Frame for it),
with the same frames read as before."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
import zmq

from pzq import zmqio
from pzq.bench.nodes import wait_until

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


@contextmanager
def python_calls() -> Iterator[list[str]]:
    """The Python functions called meanwhile, but this file's (a profile hook: C calls
    are not listed)."""
    called: list[str] = []

    def hook(frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and frame.f_code.co_filename != __file__:
            called.append(frame.f_code.co_qualname)
    sys.setprofile(hook)
    try:
        yield called
    finally:
        sys.setprofile(None)


def connected(open_socket: Sockets, name: str) -> tuple[zmq.Socket, zmq.Socket]:
    router, dealer = open_socket(zmq.ROUTER), open_socket(zmq.DEALER)
    router.bind(f"inproc://{name}")
    dealer.connect(f"inproc://{name}")
    return router, dealer


def test_readable_asks_no_python_call_and_tells_whether_input_waits(
        open_socket: Sockets) -> None:
    router, dealer = connected(open_socket, "fast-readable")
    with python_calls() as called:
        empty = zmqio.readable(router)
    assert not empty
    # (readable itself; pyzmq's get made a SocketOption enum: its __call__ and __new__)
    assert [name for name in called if "contextmanager" not in name
            and not name.endswith("__exit__")] == ["readable"]
    dealer.send_multipart([b"id", b"", b"body"])
    assert wait_until(lambda: zmqio.readable(router), 5, message="input")
    zmqio.recv_frames(router)
    assert not zmqio.readable(router)


def test_writable_asks_no_python_call_and_tells_whether_a_send_has_room(
        open_socket: Sockets) -> None:
    pusher = open_socket(zmq.PUSH)
    pusher.setsockopt(zmq.SNDHWM, 1)
    with python_calls() as called:
        room = zmqio.writable(pusher)
    assert not room  # no peer: nowhere to send
    assert [name for name in called if "contextmanager" not in name
            and not name.endswith("__exit__")] == ["writable"]
    puller = open_socket(zmq.PULL)
    puller.bind("inproc://fast-writable")
    pusher.connect("inproc://fast-writable")
    assert wait_until(lambda: zmqio.writable(pusher), 5, message="room")


def frames_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each zmq.Frame pyzmq's receive makes (it makes them as ``zmq.Frame``)."""
    made: list[int] = []

    class Counted(zmq.Frame):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(zmq, "Frame", Counted)
    return made


@pytest.mark.parametrize("framed", [False, True])
def test_the_routing_id_is_received_as_bytes_unless_framed(
        open_socket: Sockets, monkeypatch: pytest.MonkeyPatch, framed: bool) -> None:
    router, dealer = connected(open_socket, f"fast-routing-id-{framed}")
    sent = [[b"m1", b"", b"body"], [b"m2", b"TOPIC:a", b"one", b"two"], [b"m3"],
            [b"m4", b"H"]]
    for message in sent:
        dealer.send_multipart(message)
    assert wait_until(lambda: zmqio.readable(router), 5, message="input")
    made = frames_made(monkeypatch)
    firsts, messages, drained = zmqio.drain_some(router, 10, 0, None, framed)
    assert drained
    routing_id = messages[0][0]
    assert messages == [[routing_id, *message] for message in sent]
    frames_sent = sum(map(len, sent))
    # a zmq.Frame for each frame the peer sent, and for each routing id only if framed
    # (then the refused receive that ended the drain made one too)
    assert len(made) == frames_sent + (len(sent) + 1 if framed else 0)
    assert [first.bytes for first in firsts] == ([routing_id] * len(sent) if framed else [])
