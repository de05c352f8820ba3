"""pzq in the benchmark beside the peers: a node with a consume endpoint, one topic
read by named groups only, and its own Python client (``Producer`` with a topic,
``GroupConsumer`` with ``receive_many`` and one ``ack_many`` per read)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pzq.bench.groups import groups_only
from pzq.bench.nodes import NodeProcess
from pzq.bench.peer_load import (
    SILENCE_S,
    ClaimTally,
    ConsumeTally,
    ProduceTally,
    body,
    hang,
    held,
    wait_for,
)
from pzq.bench.peer_names import PZQ_TOPIC
from pzq.bench.peer_system import AsyncioClient, Served, Setup, System
from pzq.client import GroupConsumer, Producer

REAPER = "100ms"  # how soon an expired delivery is seen (the Redis claimer polls as often)


@contextmanager
def serve(folder: Path, setup: Setup) -> Iterator[Served]:
    args = ["--hard-sync"] if setup.fsync else []
    options = ""
    if setup.ack_timeout is not None:
        args += ["--reaper-frequency", REAPER]
        options = f"ack_timeout={round(setup.ack_timeout * 1000)}ms"
    node = NodeProcess(folder / "pzq", *args, consume=True)
    try:
        node.start()
        assert node.process is not None
        groups_only(node, list(setup.groups), options)
        yield Served(node.process.pid, {"receive": node.receive_dsn,
                                        "consume": node.consume_dsn})
    finally:
        if node.running:
            node.kill()


def produce(address: dict[str, str], count: int, size: int, window: int, start: Any,
            results: Any) -> None:
    with Producer(address["receive"], window=window) as producer:
        wait_for(start)
        tally = ProduceTally()
        refused = 0
        for sent in range(1, count + 1):
            producer.send([body(size)], topic=PZQ_TOPIC)
            if sent % window == 0:
                # its ACKs looked at as they come and not kept, as the peers' clients
                # look at each pipeline's replies: kept to the end, 20 000 ACKs made the
                # producer's garbage collector run some 57 times in a run and walk its
                # whole heap once (a pause of some 12 ms), where Redis's client ran it
                # 3 or 4 times (docs/performance.rst, "The end to end's tail: ...")
                refused += sum(not ack.ok for ack in producer.acks())
        refused += sum(not ack.ok for ack in producer.flush(120))
    results.put(tally.report(count, refused))


def consume(address: dict[str, str], group: str, count: int, window: int,
            from_start: bool, ready: Any, results: Any) -> None:
    tally = ConsumeTally(from_start)
    consumer = GroupConsumer(address["consume"], PZQ_TOPIC, group, window=window)
    tally.joined(ready)
    while tally.count < count:
        messages = consumer.receive_many(window, timeout=SILENCE_S)
        if not messages:
            break
        tally.took(message.parts[0] for message in messages)
        consumer.ack_many(messages)
    results.put(tally.report(group))
    consumer.close()


def hold(address: dict[str, str], group: str, count: int, results: Any) -> None:
    consumer = GroupConsumer(address["consume"], PZQ_TOPIC, group, window=count)
    taken = 0
    while taken < count:
        messages = consumer.receive_many(count - taken, timeout=SILENCE_S)
        if not messages:
            break
        taken += len(messages)
    results.put(held(taken))
    hang()  # the connection stays: ZeroMQ's I/O thread answers the node's heartbeats


def claim(address: dict[str, str], group: str, count: int, ack_timeout: float, go: Any,
          results: Any) -> None:
    go.wait()
    consumer = GroupConsumer(address["consume"], PZQ_TOPIC, group, window=count)
    results.put({"role": "ready"})
    tally = ClaimTally()
    while len(tally.seen) < count:
        messages = consumer.receive_many(count, timeout=ack_timeout + SILENCE_S)
        if not messages:
            break
        tally.took(message.parts[0] for message in messages)
        consumer.ack_many(messages)
    results.put(tally.report())
    consumer.close()


def system() -> System:
    from pzq.bench import peer_pzq_aio

    return System("pzq", "pzq", lambda: None, serve, produce, consume, hold, claim,
                  AsyncioClient(peer_pzq_aio.produce, peer_pzq_aio.consume))
