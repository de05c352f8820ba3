"""pzq as installed (not from a clone) is typed for its users: the package a build
makes holds the PEP 561 marker, so ``mypy --strict`` checks a program's calls of
pzq.aio and pzq.client against their annotations instead of refusing the import
("module is installed, but missing library stubs or py.typed marker")."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def test_a_built_package_holds_py_typed_and_its_other_data(tmp_path):
    built = tmp_path / "lib"
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q",
                    "build_py", "--build-lib", str(built)],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)
    assert (built / "pzq" / "py.typed").is_file()
    assert (built / "pzq" / "monitoring" / "status.html").is_file()


USER_PROGRAM = '''
import asyncio

from pzq import aio
from pzq.client import (ClientClosed, ConsumeRefused, ConsumeUnanswered, Consumer,
                        GroupConsumer, Message, Producer, ProducerAck, PzqError,
                        RoutedGroupConsumer, RoutedProducer, StatsAnswer, fetch_stats,
                        monitor_figures, request_monitor)


def sync_clients(dsn: str) -> None:
    with Producer(dsn) as producer:
        msg_id: bytes = producer.send([b"a"], topic="orders")
        ack: ProducerAck = producer.produce([b"b"], topic="orders", dedup_id="order-1")
        acks: list[ProducerAck] = producer.flush(5.0)
        done: bool = producer.closed
        print(msg_id, ack.ok, ack.duplicate, ack.given_up, len(acks), done)
    try:
        with GroupConsumer(dsn, "orders", "billing", declare=True) as group:
            message: Message | None = group.receive(1.0)
            if message is not None:
                body: bytes = message.parts[0]
                when: int = message.deadline_us
                print(body, when, message.headers.get("TOPIC"), message.deliveries)
                message.ack()
            for each in group.receive_many(10, 0.1):
                each.nack(delay=1.0)
    except ConsumeUnanswered as silent:
        waited: float = silent.waited
        print(waited, silent.reason)
    except (ConsumeRefused, ClientClosed, PzqError) as refused:
        print(refused)
    with Consumer(dsn) as consumer:
        for delivered in consumer.messages(0.1):
            delivered.ack()
    stats: StatsAnswer = fetch_stats(dsn)
    if stats.stats is not None:
        print(stats.up, stats.error)
    figures: dict[str, str] = monitor_figures(dsn)
    answer: bytes = request_monitor(dsn, "PING")
    print(figures, answer)
    with RoutedProducer(dsn, "t") as routed:
        routed.send([b"x"], key="k")
    with RoutedGroupConsumer(dsn, "t", "g") as routed_group:
        routed_group.ack_many(routed_group.receive_many(5, 0.1))


async def asyncio_clients(dsn: str) -> None:
    async with aio.Producer(dsn) as producer:
        ack: aio.ProducerAck = await producer.send([b"a"], topic="orders")
        future: asyncio.Future[aio.ProducerAck] = await producer.publish([b"b"])
        await producer.flush(5.0)
        print(ack.ok, future.result().msg_id)
    try:
        async with aio.GroupConsumer(dsn, "orders", "billing") as group:
            message: aio.Message | None = await group.receive(1.0)
            if message is not None:
                await message.ack()
            async for each in group.messages(0.1):
                await each.nack(delay=1.0)
    except (aio.ConsumeRefused, aio.ConsumeUnanswered, aio.ClientClosed) as exc:
        print(exc)
    async with aio.Consumer(dsn) as consumer:
        for delivered in await consumer.receive_many(5, 0.1):
            await delivered.ack()
    stats: aio.StatsAnswer = await aio.fetch_stats(dsn)
    print(stats.up, await aio.monitor_figures(dsn), await aio.request_monitor(dsn, "PING"))
    async with aio.ArchiveReader(dsn, "orders") as reader:
        async for offset, archived in reader.messages(await reader.earliest()):
            print(offset, archived.parts)
    async with aio.RoutedProducer(dsn, "t") as routed:
        await routed.send([b"x"], key="k")
    async with aio.RoutedGroupConsumer(dsn, "t", "g") as routed_group:
        await routed_group.ack_many(await routed_group.receive_many(5, 0.1))
'''


@pytest.mark.timeout(180)
def test_a_user_program_of_every_client_type_checks_strictly(tmp_path):
    """A program calling each client of either package, its results given the types
    the docs say, passes ``mypy --strict``: no missing stubs, no Any where a caller
    would type the result (``StatsAnswer.stats``, the node's JSON, aside)."""
    program = tmp_path / "user_program.py"
    program.write_text(USER_PROGRAM)
    found = subprocess.run([Path(sys.executable).parent / "mypy", "--strict",
                            "--no-incremental", "--config-file", os.devnull, str(program)],
                           cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert found.returncode == 0, found.stdout
