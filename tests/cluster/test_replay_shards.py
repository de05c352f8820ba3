"""In a cluster each node replays its own archive, and a routed group consumer gets
every node's replay: ``pzq --shards 2``, one archive directory a shard."""

from __future__ import annotations

import pytest

from pzq.client import Producer, RoutedGroupConsumer, request_monitor
from tests.cluster.test_shards import SHARDS, start_shards, wait_every_shard_up
from tests.support.harness import wait_until
from tests.support.ports import port_for_shards

__all__ = ["start_shards"]  # the fixture, used here

pytestmark = pytest.mark.timeout(120)


def ask(dsn: str, command: str) -> str:
    return request_monitor(dsn, command, timeout=10).decode()


def drain(consumer: RoutedGroupConsumer, count: int) -> list:
    got: list = []

    def enough() -> bool:
        messages = consumer.receive_many(100, 0.2)
        consumer.ack_many(messages)
        got.extend(messages)
        return len(got) >= count
    wait_until(enough, 30, interval=0, message=f"{count} deliveries")
    assert consumer.receive_many(100, 0.3) == []
    return got


def test_each_shard_replays_its_own_archive_to_a_routed_consumer(start_shards, context,
                                                                 tmp_path):
    supervisor = start_shards("--archive-dir", str(tmp_path / "archive"), "--consume-dsn",
                              f"tcp://127.0.0.1:{port_for_shards(SHARDS)}",
                              "--flush-interval", "50", "--ack-timeout", "30s",
                              "--reaper-frequency", "100ms")
    wait_every_shard_up(supervisor)
    shards = [supervisor.shard(number) for number in range(SHARDS)]
    bodies = set()
    for number, shard in enumerate(shards):
        assert ask(shard.monitor_dsn, "DECLARE TOPIC orders").startswith("topic orders")
        assert ask(shard.monitor_dsn, "DECLARE GROUP orders g").startswith("group g")
        with Producer(shard.receive_dsn, context=context) as producer:
            for n in range(20):
                body = b"shard%d-%02d" % (number, n)
                producer.send([body], topic="orders")
                bodies.add(body)
            assert all(ack.ok for ack in producer.flush(20))
    consumer = RoutedGroupConsumer(shards[0].monitor_dsn, "orders", "g", context=context)
    try:
        assert {message.parts[0] for message in drain(consumer, 40)} == bodies
        for shard in shards:
            wait_until(lambda shard=shard: shard.stats()["archive"]["archived"] == 20
                       and shard.stats()["messages"] == 0, 20, message="archived, gone")
        replay_ids = []
        for shard in shards:
            answer = ask(shard.monitor_dsn, "REPLAY GROUP orders g from=earliest")
            assert ": 20 messages from archive byte offset 0 to " in answer, answer
            replay_ids.append(answer.split()[1].encode())
        again = drain(consumer, 40)
    finally:
        consumer.close()
    assert sorted(message.parts[0] for message in again) == sorted(bodies)
    assert {message.key.split(b"-")[0] for message in again} == set(replay_ids)
    for shard in shards:
        wait_until(lambda shard=shard: "state=done" in ask(shard.monitor_dsn, "REPLAYS"), 10,
                   message="each shard's replay done")
