"""Ports for test nodes that restart on the ports they were first given.

Below the range the kernel hands out for port 0 and outgoing connections (32768 and
up on Linux), so that no other process's connection takes one between a node's stop
and its restart. Each test worker (scripts/run-tests runs three) draws from a range
of its own (the span cut into as many as the run has), and a process never hands out
a port twice; another program may still hold one, which the node's first bind finds
(``NodeProcess.start`` then draws again).
"""

from __future__ import annotations

import os
import random

from pzq.bench.ports import ports_free

LOWEST, HIGHEST = 20_000, 32_700
# Blocks of ports have a span of their own: single ports drawn at random over a
# worker's range for hours leave no long run of free ones among them.
BLOCKS_LOWEST, BLOCKS_HIGHEST = 14_000, 20_000
# The span is cut into one range per xdist worker (gw0, gw1, ...), as many as the run
# has: cut into a fixed 8 for a run of 3, a worker's range of some 1 570 ports ran out
# of shards' evenly spaced free ports late in a full run (each port is handed out once)
WORKERS = 8  # when the run does not say how many workers it has
_handed_out: set[int] = set()


def _own_range(lowest: int = LOWEST, highest: int = HIGHEST) -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    workers = int(count) if count.isdigit() and int(count) > 0 else WORKERS
    if "PYTEST_XDIST_WORKER" not in os.environ:
        workers = 1  # one process: the whole span
    index = int(worker) % workers if worker.isdigit() else 0
    width = (highest - lowest) // workers
    return range(lowest + index * width, lowest + (index + 1) * width)


def port_below_ephemeral() -> int:
    """A port free now, from this worker's range, not handed out before here."""
    return port_for_shards(1)


def port_for_shards(shards: int, step: int = 10) -> int:
    """A port P such that P, P + step, ... P + step·(shards - 1) are free now, from this
    worker's range, none handed out before here: ``pzq --shards`` binds shard K's
    endpoints on the given ports + 10·K."""
    ports = range(_own_range().start, _own_range().stop - step * (shards - 1))
    for _ in range(200):
        port = random.choice(ports)
        wanted = [port + step * shard for shard in range(shards)]
        if _handed_out.intersection(wanted) or not all(map(_free, wanted)):
            continue
        _handed_out.update(wanted)
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {ports.start}-{ports.stop - 1}")


def _free(port: int) -> bool:
    return ports_free([port])


def block_of_ports(width: int) -> int:
    """A port P such that P to P + width - 1 are free now, from this worker's range, none
    handed out before here: a page of examples moves its fixed ports into it."""
    own = _own_range(BLOCKS_LOWEST, BLOCKS_HIGHEST)
    starts = range(own.start, own.stop - width, width)
    for _ in range(200):
        start = random.choice(starts)
        wanted = range(start, start + width)
        if _handed_out.intersection(wanted) or not ports_free(wanted):
            continue
        _handed_out.update(wanted)
        return start
    raise RuntimeError(f"no {width} free ports on 127.0.0.1 in {starts.start}-{starts.stop}")
