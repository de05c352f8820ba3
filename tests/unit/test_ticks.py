"""The parts' periodic wake-ups kept by the loop (pzq.node.ticks): each reason on a grid
of its period, the poll's wait shortened to the soonest, and a node's tick handed to
its parts by the wake in which it is due, with no thread and nothing through the
waker's pipe."""

from __future__ import annotations

import os

import pytest

from pzq.clock import Now
from pzq.node.ticks import Ticks
from pzq.parts import HEARTBEAT, REAP
from pzq.serving.send_endpoint import SendEndpoint
from tests.support.devices import wake_until

pytestmark = pytest.mark.timeout(30)


def test_each_reason_is_due_on_its_grid():
    ticks = Ticks({REAP: 2_500_000, HEARTBEAT: 1_000_000}, mono=100.0)
    assert ticks.soonest == 101.0
    assert ticks.due(100.9) == b""
    assert ticks.due(101.0) == HEARTBEAT
    assert ticks.soonest == 102.0
    assert ticks.due(102.5) == REAP + HEARTBEAT  # (in the order the parts named them)
    assert ticks.soonest == 103.0 and ticks.due(103.0) == HEARTBEAT


def test_missed_ticks_come_once_and_the_grid_holds():
    ticks = Ticks({REAP: 2_500_000}, mono=0.0)
    assert ticks.due(9.0) == REAP  # 2.5, 5.0 and 7.5 missed: one tick
    assert ticks.soonest == 10.0


def test_the_poll_waits_at_most_until_the_soonest_tick():
    ticks = Ticks({REAP: 2_500_000}, mono=0.0)
    assert ticks.timeout_ms(0.0, None) == 2500
    assert ticks.timeout_ms(0.0, 40) == 40
    assert ticks.timeout_ms(2.4995, 40) == 1  # rounded up: never a wake before it is due
    assert ticks.timeout_ms(3.0, None) == 0
    assert Ticks({}, mono=0.0).timeout_ms(0.0, None) is None  # no ticks: the parts' wait


def test_a_node_reaps_at_its_tick_without_the_waker(open_device):
    device = open_device("--reaper-frequency", "20ms")
    send = next(part for part in device.parts if isinstance(part, SendEndpoint))
    tracking = send.deliveries.state
    started = Now.read()
    device.start(started)
    wait = device.poll_timeout_ms(started)
    assert wait is not None and wait <= 20  # the loop wakes for its tick
    wake_until(device, lambda: tracking.evictable_before_us >= started.wall_us,
               "the reaper's tick")
    with pytest.raises(BlockingIOError):  # no one wrote to the waker's pipe
        os.read(device.waker.fileno(), 1)
