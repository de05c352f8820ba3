"""pzq's asyncio client in the benchmark beside the peers: the same node and topic as
pzq.bench.peer_pzq, driven by pzq.aio as an asyncio service would (``publish`` with
at most a window unanswered, a GroupConsumer with ``receive_many`` and one
``ack_many`` per read), one event loop in the load generator's process."""

from __future__ import annotations

import asyncio
from typing import Any

from pzq.bench.peer_load import SILENCE_S, ConsumeTally, ProduceTally, body, wait_for
from pzq.bench.peer_names import PZQ_TOPIC

ANSWER_TIMEOUT_S = 120.0


def produce(address: dict[str, str], count: int, size: int, window: int, start: Any,
            results: Any) -> None:
    results.put(asyncio.run(_produce(address, count, size, window, start)))


async def _produce(address: dict[str, str], count: int, size: int, window: int,
                   start: Any) -> dict[str, Any]:
    from pzq import aio

    async with aio.Producer(address["receive"], window=window) as producer:
        await asyncio.get_running_loop().run_in_executor(None, wait_for, start)
        tally = ProduceTally()
        answers = [await producer.publish([body(size)], topic=PZQ_TOPIC) for _ in range(count)]
        await producer.flush(ANSWER_TIMEOUT_S)
        failed = sum(not answer.result().ok for answer in answers)
        return tally.report(count - failed, failed)


def consume(address: dict[str, str], group: str, count: int, window: int,
            from_start: bool, ready: Any, results: Any) -> None:
    results.put(asyncio.run(_consume(address, group, count, window, from_start, ready)))


async def _consume(address: dict[str, str], group: str, count: int, window: int,
                   from_start: bool, ready: Any) -> dict[str, Any]:
    from pzq import aio

    tally = ConsumeTally(from_start)
    async with aio.GroupConsumer(address["consume"], PZQ_TOPIC, group, window=window) as consumer:
        tally.joined(ready)
        while tally.count < count:
            messages = await consumer.receive_many(window, timeout=SILENCE_S)
            if not messages:
                break
            tally.took(message.parts[0] for message in messages)
            await consumer.ack_many(messages)
        return tally.report(group)
