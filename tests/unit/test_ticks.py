"""The parts' periodic wake-ups (pzq.node.scheduler): APScheduler interval jobs run by
the loop's own wakes. Each reason on its interval's grid from the start, missed runs
coalesced into one, the poll's wait shortened to the next run, and a node's tick handed
to its parts by the wake in which it is due: in the loop's thread, with no thread
started and nothing through the waker's pipe."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime

import pytest

from pzq.clock import Now
from pzq.node.scheduler import LoopScheduler
from pzq.parts import HEARTBEAT, REAP
from pzq.serving.send_endpoint import SendEndpoint
from tests.support.devices import wake_until

pytestmark = pytest.mark.timeout(30)


def _started(periods_us: dict[bytes, int]) -> LoopScheduler:
    scheduler = LoopScheduler(periods_us)
    scheduler.start()
    return scheduler


def _due_within(scheduler: LoopScheduler, seconds: float) -> bytes:
    """The reasons of the runs due within ``seconds``, asked as the loop asks: a wake
    at each deadline (the poll's timeout waited out)."""
    reasons, end = b"", time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        wait = scheduler.timeout_ms(now, None)
        assert wait is not None
        time.sleep(min(wait / 1000, end - now))  # (the poll's wait, nothing to wake it)
        if time.monotonic() >= scheduler.soonest:
            reasons += scheduler.due()
    return reasons


def test_each_reason_is_due_on_its_interval():
    start = time.monotonic()
    scheduler = _started({REAP: 2_500_000, HEARTBEAT: 1_000_000})
    assert start + 0.9 < scheduler.soonest <= time.monotonic() + 1.0  # the heartbeat's
    assert scheduler.due() == b""  # (asked early: nothing runs)
    jobs = {job.id: job for job in scheduler.get_jobs()}
    assert jobs["R"].trigger.interval_length == 2.5 and jobs["H"].trigger.interval_length == 1
    assert all(job.coalesce and job.max_instances == 1 for job in jobs.values())
    fast = _started({REAP: 150_000, HEARTBEAT: 60_000})
    reasons = _due_within(fast, 0.65)
    # (4 and 10 on time; fewer if a loaded machine makes the waits late: coalesced, as
    # both are when one wait overruns the whole span)
    assert 1 <= reasons.count(REAP) <= 5, reasons
    assert reasons.count(REAP) <= reasons.count(HEARTBEAT) <= 11, reasons


def test_missed_runs_come_once_and_the_grid_holds():
    scheduler = _started({REAP: 20_000})
    job = scheduler.get_job("R")
    first = job.next_run_time
    time.sleep(0.1)  # a long wake: four or five runs missed
    wall, mono = datetime.now(UTC), time.monotonic()
    assert scheduler.due() == REAP
    late = (job.next_run_time - first).total_seconds()
    assert late > 0.08 and round(late / 0.02, 6).is_integer()  # still on the 20 ms grid
    assert job.next_run_time > wall and scheduler.soonest > mono  # not one of the missed


def test_the_poll_waits_at_most_until_the_next_run():
    scheduler = _started({REAP: 2_500_000})
    mono = time.monotonic()
    assert 2000 <= (scheduler.timeout_ms(mono, None) or 0) <= 2500
    assert scheduler.timeout_ms(mono, 40) == 40
    soonest = scheduler.soonest
    assert scheduler.timeout_ms(soonest - 0.0005, 40) == 1  # rounded up: never early
    assert scheduler.timeout_ms(soonest + 0.5, None) == 0
    assert _started({}).timeout_ms(mono, None) is None  # no jobs: the parts' wait
    scheduler.shutdown()
    assert scheduler.timeout_ms(mono, None) is None


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


def test_the_jobs_run_in_the_loops_thread_and_start_none(open_device):
    device = open_device("--reaper-frequency", "20ms")
    threads = threading.active_count()
    device.start(Now.read())
    assert device.timer.running and threading.active_count() == threads
    ran_in: list[int] = []
    device.timer.add_job(lambda: ran_in.append(threading.get_ident()), "interval",
                         seconds=0.02)
    wake_until(device, lambda: bool(ran_in), "a job's run")
    assert set(ran_in) == {threading.get_ident()}  # the thread that runs the wakes
    assert threading.active_count() == threads
