"""Driving a node's Device (tests/unit/conftest.py's ``open_device``) wake by wake."""

from __future__ import annotations

import zmq

from pzq.clock import Now
from pzq.node.device import Device


def wake(device: Device, timeout_ms: int = 0) -> None:
    """One wake of the node's loop (pzq.node.run), waiting up to ``timeout_ms`` for
    something to do."""
    poller = zmq.Poller()
    for polled in device.polled():  # as pzq.node.run's poller holds them from the start
        poller.register(polled, zmq.POLLIN)
    device.interest(poller, Now.read())
    device.wake(dict(poller.poll(timeout_ms)), Now.read())
