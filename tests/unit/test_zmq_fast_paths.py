"""pzq.zmqio's paths past pyzmq's per-call costs: whether input waits is asked by a poll
of the one socket (no ``SocketOption`` enum made in Python)."""

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
