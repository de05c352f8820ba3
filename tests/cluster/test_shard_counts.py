"""pzq --shards with --replicas, its count of shards changed: 3 shards, then 2, then 3.
The run of 2 leaves shard 2's store unused and takes its messages over from the
copies; its group finishes them there, and the run of 3 after it must not deliver
them again from shard 2's store (docs/cluster.rst, ``shard_store_unused``)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pzq.client import GroupConsumer, Producer, request_monitor
from tests.cluster.test_shards import SERVICES, Supervisor, start_shards, wait_every_shard_up
from tests.support.harness import wait_until
from tests.support.ports import port_for_shards

__all__ = ["start_shards"]  # the fixture, used here

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="shards end with their supervisor on Linux only")]

PER_SHARD = 100
OPTIONS = ("--replicas", "1", "--timeout-nodes", "1s", "--timeout-replication", "2s")


def consume_dsn(supervisor: Supervisor, number: int) -> str:
    return f"tcp://127.0.0.1:{supervisor.ports['consume'] + 10 * number}"


def started(start: Callable[..., Supervisor], shards: int, ports: dict[str, int],
            tmp_path: Any) -> Supervisor:
    supervisor = start(*OPTIONS, database=tmp_path / "shards", shards=shards, ports=ports)
    wait_every_shard_up(supervisor)
    return supervisor


def take(supervisor: Supervisor, context: Any, count: int) -> list[bytes]:
    """g1's deliveries on every shard, each ACKed, until ``count`` different came."""
    got: list[bytes] = []
    consumers = [GroupConsumer(consume_dsn(supervisor, number), "orders", "g1",
                               context=context) for number in range(supervisor.shards)]
    try:
        def enough() -> bool:
            for consumer in consumers:
                messages = consumer.receive_many(100, 0.02)
                got.extend(message.parts[0] for message in messages)
                consumer.ack_many(messages)
            return len(set(got)) >= count
        wait_until(enough, 60, interval=0, message=f"{count} messages of g1")
    finally:
        for consumer in consumers:
            consumer.close()
    return got


def no_owed_dones(supervisor: Supervisor) -> bool:
    return all(peer["removes_owed"] == 0 for number in range(supervisor.shards)
               for peer in supervisor.shard(number).stats()["peers"])


@pytest.mark.parametrize("kill_a_survivor", [False, True], ids=["stopped", "survivor-killed"])
def test_shards_counted_down_and_up_again_deliver_nothing_twice(
        start_shards, context, tmp_path, kill_a_survivor):
    ports = {service: port_for_shards(3) for service in (*SERVICES, "consume")}
    three = started(start_shards, 3, ports, tmp_path)
    bodies: set[bytes] = set()
    for number in range(3):
        monitor = three.shard(number).monitor_dsn
        for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders g1"):
            assert not request_monitor(monitor, command, 10).startswith(b"ERROR")
        with Producer(three.shard(number).receive_dsn, window=50, context=context) as producer:
            for index in range(PER_SHARD):
                body = b"%d-%03d" % (number, index)
                producer.send([body], topic="orders")
                bodies.add(body)
            acks = producer.flush(30)
        assert all(ack.ok and not ack.replication_failed for ack in acks), acks
    assert three.signal_and_wait(signal.SIGINT) == 0

    # Two shards: shard 2's store is unused, its messages taken over from the copies
    two = started(start_shards, 2, ports, tmp_path)
    assert two.events("shard_store_unused")
    wait_until(lambda: any(two.shard(n).stats()["takeovers"] for n in range(2)), 30,
               interval=0.1, message="shard 2's messages taken over")
    assert set(take(two, context, 3 * PER_SHARD)) == bodies
    wait_until(lambda: no_owed_dones(two), 30, interval=0.1,
               message="the shards of the run confirmed every DONE")
    if kill_a_survivor:  # what it keeps for shard 2 must survive SIGKILL
        for number in range(2):
            os.kill(two.pids(number)[-1], signal.SIGKILL)
        wait_until(lambda: all(len(two.pids(n)) == 2 for n in range(2))
                   and len(two.events("node_ready")) == 4, 30, interval=0.1,
                   message="both shards started again")
        wait_every_shard_up(two)
    assert two.signal_and_wait(signal.SIGINT) == 0

    # Three shards again: shard 2 learns what g1 finished while it was not in the run
    three = started(start_shards, 3, ports, tmp_path)
    consumers = [GroupConsumer(consume_dsn(three, number), "orders", "g1", context=context)
                 for number in range(3)]
    again: list[bytes] = []
    try:
        def shard_2_emptied() -> bool:
            for consumer in consumers:
                messages = consumer.receive_many(100, 0.02)
                again.extend(message.parts[0] for message in messages)
                consumer.ack_many(messages)
            return three.shard(2).stats()["messages"] == 0
        wait_until(shard_2_emptied, 30, interval=0,
                   message="shard 2 deleting what g1 finished in the run of two")
        again.extend(message.parts[0] for consumer in consumers
                     for message in consumer.receive_many(100, 0.5))
    finally:
        for consumer in consumers:
            consumer.close()
    assert len(again) == 0, f"{len(again)} of {len(bodies)} delivered again"
    wait_until(lambda: no_owed_dones(three), 30, interval=0.1,
               message="every DONE confirmed")
