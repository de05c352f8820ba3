"""The consumers of bench_peers' drain start together: each, once connected, waits
until all have, and is timed from there, however late it joined."""

import multiprocessing
import time
from typing import Any

import pytest

from pzq.bench.peer_load import ConsumeTally

pytestmark = pytest.mark.timeout(30)


def join_late(late_s: float, start: Any, results: Any) -> None:
    """A consumer whose connect takes ``late_s``: when its tally starts."""
    tally = ConsumeTally(from_start=True)
    time.sleep(late_s)  # its connect, slower than the others'
    tally.joined(start)
    results.put(tally.started)


def test_consumers_that_join_apart_are_timed_from_one_start():
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(3), spawn.Queue()
    workers = [spawn.Process(target=join_late, args=(late_s, start, results))
               for late_s in (0.0, 0.3, 0.6)]
    for worker in workers:
        worker.start()
    started = [results.get(timeout=20) for _ in workers]
    for worker in workers:
        worker.join(5)
    # perf_counter is the machine's monotonic clock: comparable across processes
    assert max(started) - min(started) < 0.2


def test_an_end_to_end_consumer_says_it_joined_and_is_timed_from_its_first_delivery():
    joined = multiprocessing.get_context("spawn").Event()
    tally = ConsumeTally(from_start=False)
    tally.joined(joined)
    assert joined.is_set() and tally.started is None
    tally.took([bytes(8)])
    assert tally.started == tally.last
