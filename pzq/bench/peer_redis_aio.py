"""Redis Streams with redis-py's asyncio client (``redis.asyncio``, hiredis) in the
benchmark beside pzq's asyncio client: the same server and commands as
pzq.bench.peer_redis (XADD pipelined a window at a time; XREADGROUP COUNT window
with the previous read's XACK in the same pipeline), awaited on one event loop."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pzq.bench.peer_load import SILENCE_S, ConsumeTally, ProduceTally, body, wait_for
from pzq.bench.peer_names import REDIS_FIELD, REDIS_STREAM


def _client(address: dict[str, str]) -> Any:
    import redis.asyncio  # only when Redis is measured: the peers' packages are optional

    return redis.asyncio.Redis(host="127.0.0.1", port=int(address["port"]))


def produce(address: dict[str, str], count: int, size: int, window: int, start: Any,
            results: Any) -> None:
    results.put(asyncio.run(_produce(address, count, size, window, start)))


async def _produce(address: dict[str, str], count: int, size: int, window: int,
                   start: Any) -> dict[str, Any]:
    client = _client(address)
    await client.ping()
    await asyncio.get_running_loop().run_in_executor(None, wait_for, start)
    tally = ProduceTally()
    sent = 0
    while sent < count:
        pipe = client.pipeline(transaction=False)
        for _ in range(min(window, count - sent)):
            pipe.xadd(REDIS_STREAM, {REDIS_FIELD: body(size)})
            sent += 1
        await pipe.execute()
    report = tally.report(sent)
    await client.aclose()
    return report


def consume(address: dict[str, str], group: str, count: int, window: int,
            from_start: bool, ready: Any, results: Any) -> None:
    results.put(asyncio.run(_consume(address, group, count, window, from_start, ready)))


async def _consume(address: dict[str, str], group: str, count: int, window: int,
                   from_start: bool, ready: Any) -> dict[str, Any]:
    client = _client(address)
    tally = ConsumeTally(from_start)
    await client.ping()
    tally.joined(ready)
    name = f"c{os.getpid()}"
    ids: list[bytes] = []
    while tally.count < count:
        pipe = client.pipeline(transaction=False)
        if ids:
            pipe.xack(REDIS_STREAM, group, *ids)  # the last read's, with the next read
        pipe.xreadgroup(group, name, {REDIS_STREAM: ">"}, count=window,
                        block=round(SILENCE_S * 1000))
        read = (await pipe.execute())[-1]
        entries = list(read[0][1]) if read else []
        if not entries:
            ids = []
            break
        ids = [entry_id for entry_id, _ in entries]
        tally.took(fields[REDIS_FIELD] for _, fields in entries)
    if ids:
        await client.xack(REDIS_STREAM, group, *ids)
    report = tally.report(group)
    await client.aclose()
    return report
