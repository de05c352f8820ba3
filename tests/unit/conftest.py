"""Fixtures of the unit tests: a real store, a node's Device on inproc endpoints
of a real context, with a real store, driven wake by wake by the test
(tests.support.devices.wake), and three simulated cluster nodes
(tests.support.cluster_sim)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.node.main import open_store, parse_config
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.security import NO_CURVE
from pzq.store.store import Store
from tests.support.cluster_sim import T0, SimNetwork, three_heard

_names = itertools.count()
DEFAULTED = ("receive", "send", "monitor")  # the endpoints a node binds unless told


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A real store of the test's own, closed after."""
    opened = Store.open(tmp_path / "db")
    yield opened
    opened.close()


@pytest.fixture
def three(tmp_path: Path) -> Iterator[SimNetwork]:
    """Three simulated cluster nodes (--replicas 2) that have heard each other at T0."""
    yield from three_heard(tmp_path, T0)


@pytest.fixture
def open_device(tmp_path: Path, context: zmq.Context) -> Iterator[Callable[..., Device]]:
    """A Device on inproc endpoints named for the test (``tcp``: on loopback ports, where
    connections make monitor events; True, or the roles that are); closed, with its
    store, after."""
    made: list[tuple[Device | None, NodeState]] = []

    def make(*options: str, roles: tuple[str, ...] = ("receive", "send", "monitor"),
             tcp: bool | tuple[str, ...] = False) -> Device:
        name = f"inproc://registry-{next(_names)}"
        on_tcp = roles if tcp is True else tcp or ()
        # The endpoints with a default are bound whether asked or not: at the quick
        # start's tcp://*:11132 and ipc:///tmp/pzq-monitor they failed these tests while
        # that node ran (or took its ports): each gets a private inproc one instead.
        roles = (*roles, *(role for role in DEFAULTED if role not in roles))
        endpoints = [arg for role in roles for arg in (
            f"--{role}-dsn", "tcp://127.0.0.1:*" if role in on_tcp else f"{name}-{role}")]
        config = parse_config(["--database", str(tmp_path / f"db{len(made)}"), *endpoints,
                               *options])
        node = NodeState(config, open_store(config), Now.read())
        made.append((None, node))
        device = Device(node, waker, context, NO_CURVE, Now.read())
        made[-1] = (device, node)
        return device

    waker = Waker()
    yield make
    for device, node in made:
        if device is not None:
            device.close()
        node.store.close()
    waker.close()
