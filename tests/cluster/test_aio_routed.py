"""pzq.aio's routing clients on a cluster of real daemons: each key to its owner in
order, every node read, and a dead owner's partitions followed with nothing ACKed
lost (the sync clients' test: tests/cluster/test_partitioned_topics.py)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from pzq import aio
from pzq.protocol.headers import partition_of
from tests.cluster.test_groups_cluster import start_group_cluster
from tests.cluster.test_partitioned_topics import (
    PARTITIONS,
    declared_everywhere,
    ipc_cluster,
    keyed_messages,
    node_by_cluster_endpoint,
    routes,
)
from tests.support.aio import eventually, run

pytestmark = pytest.mark.timeout(180)


async def drain(consumer: aio.RoutedGroupConsumer, wanted: set[bytes]) -> list[aio.Message]:
    got: dict[bytes, aio.Message] = {}

    async def more() -> bool:
        messages = await consumer.receive_many(100, 0.2)
        for message in messages:
            got.setdefault(message.parts[0], message)
        await consumer.ack_many(messages)
        return wanted <= got.keys()

    while not await more():
        assert len(got) <= len(wanted) * 2
    return list(got.values())


def test_routing_clients_follow_owners_keep_key_order_and_lose_nothing(start_node, tmp_path,
                                                                       aio_context):
    endpoints = ipc_cluster(tmp_path, 3)
    nodes = start_group_cluster(start_node, endpoints)
    nodes[1].ask(f"DECLARE TOPIC orders partitions={PARTITIONS}")
    table = declared_everywhere(nodes)
    owners = table["topics"]["orders"]["owners"]
    victim = max(endpoints, key=owners.count)
    by_endpoint = node_by_cluster_endpoint(nodes, endpoints)
    survivors = [node for endpoint, node in by_endpoint.items() if endpoint != victim]

    async def main() -> None:
        async with aio.RoutedGroupConsumer(nodes[2].monitor_dsn, "orders", "billing",
                                           context=aio_context) as consumer:
            assert len(consumer.consumers) == 3
            async with aio.RoutedProducer(nodes[0].monitor_dsn, "orders",
                                          context=aio_context) as producer:
                first = keyed_messages(300, 12)
                futures = [await producer.publish([body], key=key) for key, body in first]
                await producer.flush(30)
                assert all(f.result().ok and not f.result().status_message for f in futures)
                assert producer.moved == 0  # the table was right: nothing sent twice
                ack = await producer.send([b"one more"], key=b"k0")
                assert ack.ok
            got = await drain(consumer, {body for _, body in first} | {b"one more"})
            order: dict[bytes, list[int]] = defaultdict(list)
            for message in got:
                body = message.parts[0]
                if body != b"one more":
                    order[b"k%d" % (int(body[1:]) % 12)].append(int(body[1:]))
            assert all(seqs == sorted(seqs) for seqs in order.values()), order

            async with aio.RoutedProducer([node.monitor_dsn for node in survivors], "orders",
                                          context=aio_context) as producer:
                unread = keyed_messages(60, 12)
                for key, body in unread:
                    await producer.publish([b"before-" + body], key=key)
                await producer.flush(30)
                await asyncio.to_thread(by_endpoint[victim].kill)
                await eventually(lambda: victim not in
                                 routes(survivors[0])["topics"]["orders"]["owners"], 30,
                                 "the dead owner's partitions moved")
                after = [await producer.publish([b"after-" + body], key=key)
                         for key, body in unread]
                await producer.flush(60)
                assert all(future.result().ok for future in after)
            wanted = {b"before-" + body for _, body in unread} | {b"after-" + body
                                                                  for _, body in unread}
            await drain(consumer, wanted)
    run(main(), 170)


def test_a_publish_waiting_for_room_at_an_owner_that_died_goes_on_to_its_new_owner(
        start_node, tmp_path, aio_context):
    """An owner SIGKILLed: its window fills with messages it never answers, and the next
    publish of its keys waits for room there. Once the table counts it down, its
    messages go to the new owner and its producer is closed: the waiting publish goes
    on with them, where it raised ClientClosed ("the producer is closed") of a producer
    the caller never closed, its message carried elsewhere all the same."""
    endpoints = ipc_cluster(tmp_path, 3)
    nodes = start_group_cluster(start_node, endpoints)
    nodes[1].ask(f"DECLARE TOPIC orders partitions={PARTITIONS}")
    owners = declared_everywhere(nodes)["topics"]["orders"]["owners"]
    victim = max(endpoints, key=owners.count)
    by_endpoint = node_by_cluster_endpoint(nodes, endpoints)
    survivors = [node for endpoint, node in by_endpoint.items() if endpoint != victim]
    keys = [key for key in (b"k%d" % n for n in range(200))
            if owners[partition_of(key, PARTITIONS)] == victim][:3]
    bodies = [b"m%d" % n for n in range(12)]

    async def main() -> None:
        async with aio.RoutedProducer([node.monitor_dsn for node in survivors], "orders",
                                      window=4, context=aio_context) as producer:
            await asyncio.to_thread(by_endpoint[victim].kill)  # the table counts it up yet
            futures = [await producer.publish([body], key=keys[n % len(keys)], timeout=60)
                       for n, body in enumerate(bodies)]  # the fifth waits for room
            await producer.flush(60)
            assert all(future.result().ok for future in futures)
            assert producer.resent >= 4
        async with aio.RoutedGroupConsumer([node.monitor_dsn for node in survivors],
                                           "orders", "billing",
                                           context=aio_context) as consumer:
            got = await drain(consumer, set(bodies))
        order = [int(message.parts[0][1:]) for message in got]
        for key in keys:  # each key's messages in the order sent
            mine = [n for n in order if keys[n % len(keys)] == key]
            assert mine == sorted(mine), order
    run(main(), 120)
