"""Time in messages on real clusters: a scheduled message is copied at once and
released at its time by its origin, or by a survivor when the origin is killed; an
expired message's copies go with it."""

from __future__ import annotations

import time

import pytest

from pzq.client import Consumer, Producer
from tests.cluster.test_cluster import ipc_endpoints, replicas_held, start_cluster
from tests.integration.test_time import let_time_pass
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(90)


def in_seconds(seconds: float) -> int:
    """A NOT-BEFORE time (µs since the epoch) this many seconds from now."""
    return int((time.time() + seconds) * 1e6)


def scheduled_copies(node) -> int:
    return node.stats()["scheduled_copies_held"]


def test_a_scheduled_message_is_copied_at_once_and_its_copy_goes_when_released(
        start_node, context, tmp_path):
    origin, peer = start_cluster(start_node, ipc_endpoints(tmp_path, 2), replicas=1)
    with Producer(origin.receive_dsn, context=context) as producer:
        ack = producer.produce([b"later"], topic="orders", delay=3)
        now = producer.produce([b"now"], topic="orders")
    # copied before its ACK, as any message is (docs/time.rst)
    assert ack.ok and not ack.replication_failed, ack
    assert now.ok and not now.replication_failed
    assert origin.stats()["scheduled"] == 1
    assert scheduled_copies(peer) == 1 and replicas_held(peer) == 1
    # released: the peer gets the new message's copy and drops the scheduled one
    peer.wait_stats(lambda s: s["replicas_held"] == 2 and s["scheduled_copies_held"] == 0,
                    10, message="the released copy")
    with Consumer(origin.send_dsn, context=context) as consumer:
        for _ in range(2):
            message = consumer.receive(10)
            assert message is not None
            message.ack()
    peer.wait_stats(lambda s: s["replicas_held"] == 0, 10, message="copies removed")


def receive_all(consumers, delivered: list[tuple[bytes, float]]) -> None:
    """What the consumers have now, each message ACKed and noted with when it came."""
    for consumer in consumers:
        message = consumer.receive(0.01)
        if message is not None:
            delivered.append((message.parts[0], time.time()))
            message.ack()


def test_a_survivor_delivers_a_killed_origin_s_scheduled_message_at_its_time_once(
        start_node, context, closing, tmp_path):
    """The origin is killed while the message waits; the survivor takes over at once
    (the plain message goes then), delivers the scheduled one at its time, not at the
    takeover, and once; the origin, back, drops it (the survivor's tombstone) instead
    of releasing it again."""
    origin, peer = start_cluster(start_node, ipc_endpoints(tmp_path, 2), replicas=1)
    due_us = in_seconds(5)
    with Producer(origin.receive_dsn, context=context) as producer:
        acks = [producer.produce([b"scheduled"], topic="orders", not_before=due_us),
                producer.produce([b"plain"], topic="orders")]
    assert all(ack.ok and not ack.replication_failed for ack in acks), acks
    origin.kill()
    consumer = closing.enter_context(Consumer(peer.send_dsn, context=context))
    delivered: list[tuple[bytes, float]] = []
    wait_until(lambda: receive_all([consumer], delivered) or len(delivered) == 2, 20,
               interval=0, message="both messages delivered by the survivor")
    assert [body for body, _ in delivered] == [b"plain", b"scheduled"]
    assert delivered[0][1] < due_us / 1e6 <= delivered[1][1]  # taken over before its time
    assert consumer.receive(1.0) is None  # once
    peer.wait_stats(lambda s: s["scheduled_copies_held"] == 0 and s["replicas_held"] == 0,
                    10, message="nothing held once delivered")

    origin.restart()
    origin.wait_stats(lambda s: s["scheduled"] == 0 and s["messages"] == 0, 15,
                      message="the origin dropped what the survivor released")
    with Consumer(origin.send_dsn, context=context) as again:
        assert again.receive(1.0) is None
    peer.wait_stats(lambda s: s["tombstones_held"] == 0, 10, message="tombstones applied")


def test_on_three_nodes_one_survivor_releases_a_scheduled_copy_at_its_time(
        start_node, context, closing, tmp_path):
    """Both survivors hold the scheduled copy, one of them across a SIGKILL and restart;
    the first in its holder list releases it at its time, the other drops its copy,
    and it is delivered once."""
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2)
    due_us = in_seconds(5)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        ack = producer.produce([b"scheduled"], topic="orders", not_before=due_us)
    assert ack.ok and not ack.replication_failed, ack
    assert [scheduled_copies(node) for node in nodes] == [0, 1, 1]
    nodes[2].kill()
    nodes[2].restart()
    assert scheduled_copies(nodes[2]) == 1  # kept, and indexed, across the SIGKILL
    nodes[0].kill()
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes[1:]]
    delivered: list[tuple[bytes, float]] = []
    wait_until(lambda: receive_all(consumers, delivered) or bool(delivered), 20,
               interval=0, message="the scheduled message delivered")
    assert delivered[0][1] >= due_us / 1e6
    for consumer in consumers:
        assert consumer.receive(1.0) is None
    assert [body for body, _ in delivered] == [b"scheduled"]
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["scheduled_copies_held"] == 0, 10,
                        message="no scheduled copy left")


def test_an_expired_message_s_copies_go_with_it(start_node, context, tmp_path):
    origin, peer = start_cluster(start_node, ipc_endpoints(tmp_path, 2), replicas=1)
    with Producer(origin.receive_dsn, context=context) as producer:
        ack = producer.produce([b"worth a moment"], topic="orders", ttl=0.5)
    assert ack.ok and not ack.replication_failed
    assert replicas_held(peer) == 1
    origin.wait_stats(lambda s: s["ttl_expired"] == 1 and s["dead_letters"] == 1, 10)
    peer.wait_stats(lambda s: s["replicas_held"] == 0, 10, message="the copy removed")
    with Consumer(origin.send_dsn, context=context) as consumer:
        assert consumer.receive(0.5) is None


def test_a_survivor_never_delivers_a_taken_over_copy_that_expired(start_node, context,
                                                                   tmp_path):
    """The origin dies before its message expires; the survivor that takes its copies
    over lets the expired one go (a dead letter here, as a takeover's are) and delivers
    the other."""
    origin, peer = start_cluster(start_node, ipc_endpoints(tmp_path, 2), replicas=1)
    with Producer(origin.receive_dsn, context=context) as producer:
        assert producer.produce([b"expires"], topic="orders", ttl=1.5).ok
        assert producer.produce([b"stays"], topic="orders").ok
    assert replicas_held(peer) == 2
    origin.kill()
    peer.wait_stats(lambda s: bool(s["takeovers"]), 15, message="the takeover")
    let_time_pass(1.5)  # the copy's TTL, read against its stored time, passes
    with Consumer(peer.send_dsn, context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None and message.parts[0] == b"stays"
        message.ack()
        assert consumer.receive(1.0) is None
    peer.wait_stats(lambda s: s["ttl_expired"] == 1 and s["dead_letters"] == 1
                    and s["replicas_held"] == 0, 10)


def test_on_three_nodes_no_survivor_delivers_an_expired_copy(start_node, context, closing,
                                                             tmp_path):
    """Both survivors hold copies; the one that takes over delivers the message that
    has not expired, once, and neither delivers the one that has."""
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        assert producer.produce([b"expires"], topic="orders", ttl=1.5).ok
        assert producer.produce([b"stays"], topic="orders").ok
    nodes[0].kill()
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["peers"] and all(
            p["state"] != "up" for p in s["peers"] if p["endpoint"].endswith("node0.cluster")),
            15, message="the origin down")
    let_time_pass(1.5)
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes[1:]]
    delivered: list[bytes] = []

    def stays_delivered() -> bool:
        for consumer in consumers:
            message = consumer.receive(0.01)
            if message is not None:
                delivered.append(message.parts[0])
                message.ack()
        return b"stays" in delivered

    wait_until(stays_delivered, 20, interval=0, message="the other message delivered")
    for consumer in consumers:
        assert consumer.receive(0.5) is None
    assert delivered == [b"stays"]
    wait_until(lambda: sum(node.stats()["ttl_expired"] for node in nodes[1:]) == 1, 10,
               message="the expired copy let go by the survivor")
