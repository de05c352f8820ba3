"""Driving a node's Device (tests/unit/conftest.py's ``open_device``) wake by wake."""

from __future__ import annotations

from collections.abc import Callable

import zmq

from pzq.clock import Now
from pzq.node.device import Device


def wake(device: Device, timeout_ms: int = 0) -> None:
    """One wake of the node's loop (pzq.node.run), waiting up to ``timeout_ms`` for
    something to do (the node's own timeout is asked, as the loop asks it, so the parts
    that tell their waits are asked when the loop would ask them)."""
    poller = zmq.Poller()
    for polled in device.polled():  # as pzq.node.run's poller holds them from the start
        poller.register(polled, zmq.POLLIN)
    now = Now.read()
    device.interest(poller, now)
    device.poll_timeout_ms(now)
    device.wake(dict(poller.poll(timeout_ms)), Now.read())


def wake_until(device: Device, done: Callable[[], bool], what: str) -> None:
    """Wakes of the node (each waiting up to 10 ms) until ``done``; at most 500."""
    for _ in range(500):
        if done():
            return
        wake(device, 10)
    raise AssertionError(f"not within 500 wakes: {what}")


def producer_socket(device: Device, open_socket: Callable[[int], zmq.Socket]) -> zmq.Socket:
    """A DEALER connected to the node's producers' endpoint (``open_socket``: the
    tests' fixture, which closes it)."""
    socket = open_socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(device.bound()["receive"])
    return socket
