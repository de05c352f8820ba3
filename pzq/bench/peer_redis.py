"""Redis Streams in the benchmark beside pzq: a redis-server of the run's own (append-only
file, fsync once a second or before every reply), one stream read by consumer groups,
and redis-py with hiredis: XADD pipelined a window at a time, XREADGROUP COUNT window
with the previous read's XACK in the same pipeline, XAUTOCLAIM for what another
consumer held past the ack timeout (Redis's way: nothing times a delivery out)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pzq.bench.nodes import wait_until
from pzq.bench.peer_load import (
    CLAIM_POLL_S,
    SILENCE_S,
    ClaimTally,
    ConsumeTally,
    ProduceTally,
    body,
    hang,
    held,
    wait_for,
)
from pzq.bench.peer_names import REDIS_FIELD, REDIS_STREAM
from pzq.bench.peer_servers import find_binary, free_port, missing, redis_command, running
from pzq.bench.peer_system import AsyncioClient, Served, Setup, System

MODULES = {"redis": "redis", "hiredis": "hiredis"}
INSTALL = "apt-get install redis-server, or give --redis-server PATH"


def _client(address: dict[str, str]) -> Any:
    import redis  # only when Redis is measured: the peers' packages are optional

    return redis.Redis(host="127.0.0.1", port=int(address["port"]))  # hiredis if installed


def _answers(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # still starting (LOADING) or not accepting yet
        return False


@contextmanager
def serve(folder: Path, setup: Setup, binary: Path) -> Iterator[Served]:
    port = free_port()
    data = folder / "redis"
    data.mkdir(parents=True)
    command = redis_command(binary, port, data, setup.fsync)
    with running(command, port, data / "redis.log") as process:
        address = {"port": str(port)}
        client = _client(address)
        wait_until(lambda: _answers(client), 20, message="redis-server's PING")
        for group in setup.groups:
            client.xgroup_create(REDIS_STREAM, group, id="0", mkstream=True)
        client.close()
        yield Served(process.pid, address)


def produce(address: dict[str, str], count: int, size: int, window: int, start: Any,
            results: Any) -> None:
    client = _client(address)
    client.ping()
    wait_for(start)
    tally = ProduceTally()
    pipe = client.pipeline(transaction=False)
    sent = 0
    while sent < count:
        for _ in range(min(window, count - sent)):
            pipe.xadd(REDIS_STREAM, {REDIS_FIELD: body(size)})
            sent += 1
        pipe.execute()
    results.put(tally.report(sent))
    client.close()


def _entries(read: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """An XREADGROUP answer's entries (one stream), none if it timed out."""
    return list(read[0][1]) if read else []


def consume(address: dict[str, str], group: str, count: int, window: int,
            from_start: bool, ready: Any, results: Any) -> None:
    client = _client(address)  # (imports redis-py: not the consumer's work)
    tally = ConsumeTally(from_start)
    client.ping()
    tally.joined(ready)
    name = f"c{os.getpid()}"
    pipe = client.pipeline(transaction=False)
    ids: list[bytes] = []
    while tally.count < count:
        if ids:
            pipe.xack(REDIS_STREAM, group, *ids)  # the last read's, with the next read
        pipe.xreadgroup(group, name, {REDIS_STREAM: ">"}, count=window,
                        block=round(SILENCE_S * 1000))
        entries = _entries(pipe.execute()[-1])
        if not entries:
            ids = []
            break
        ids = [entry_id for entry_id, _ in entries]
        tally.took(fields[REDIS_FIELD] for _, fields in entries)
    if ids:
        client.xack(REDIS_STREAM, group, *ids)
    results.put(tally.report(group))
    client.close()


def hold(address: dict[str, str], group: str, count: int, results: Any) -> None:
    client = _client(address)
    taken = 0
    while taken < count:
        entries = _entries(client.xreadgroup(group, "holder", {REDIS_STREAM: ">"},
                                             count=count - taken,
                                             block=round(SILENCE_S * 1000)))
        if not entries:
            break
        taken += len(entries)
    results.put(held(taken))
    hang()


def claim(address: dict[str, str], group: str, count: int, ack_timeout: float, go: Any,
          results: Any) -> None:
    go.wait()
    client = _client(address)
    client.ping()
    results.put({"role": "ready"})
    tally = ClaimTally()
    deadline = time.monotonic() + ack_timeout + SILENCE_S
    while len(tally.seen) < count and time.monotonic() < deadline:
        answer = client.xautoclaim(REDIS_STREAM, group, "claimer",
                                   min_idle_time=round(ack_timeout * 1000),
                                   start_id="0-0", count=count)
        entries = [entry for entry in answer[1] if entry[1]]  # deleted ones come empty
        if not entries:
            time.sleep(CLAIM_POLL_S)
            continue
        tally.took(fields[REDIS_FIELD] for _, fields in entries)
        client.xack(REDIS_STREAM, group, *(entry_id for entry_id, _ in entries))
    results.put(tally.report())
    client.close()


def system(binary: str | None = None) -> System:
    """Redis Streams with redis-server found on PATH, or at ``binary``; its asyncio
    client is redis-py's (``redis.asyncio``)."""
    from pzq.bench import peer_redis_aio

    found = find_binary("redis-server", binary)
    return System("Redis Streams", "Redis",
                  lambda: missing("redis-server", found, MODULES, INSTALL),
                  functools.partial(serve, binary=found or Path("redis-server")),
                  produce, consume, hold, claim,
                  AsyncioClient(peer_redis_aio.produce, peer_redis_aio.consume))
