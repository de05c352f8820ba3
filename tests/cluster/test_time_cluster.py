"""Time in messages on a real two-node cluster: a scheduled message is copied to the
peer when it is released, and an expired message's copies go with it."""

from __future__ import annotations

import pytest

from pzq.client import Consumer, Producer
from tests.cluster.test_cluster import ipc_endpoints, replicas_held, start_cluster
from tests.integration.test_time import let_time_pass

pytestmark = pytest.mark.timeout(90)


def test_a_scheduled_message_is_copied_when_released_and_the_copy_goes_with_its_ack(
        start_node, context, tmp_path):
    origin, peer = start_cluster(start_node, ipc_endpoints(tmp_path, 2), replicas=1)
    with Producer(origin.receive_dsn, context=context) as producer:
        ack = producer.produce([b"later"], topic="orders", delay=3)
        now = producer.produce([b"now"], topic="orders")
    # stored, not copied until released (docs/time.rst)
    assert ack.ok and ack.replication_failed
    assert now.ok and not now.replication_failed
    assert origin.stats()["scheduled"] == 1 and replicas_held(peer) == 1
    peer.wait_stats(lambda s: s["replicas_held"] == 2, 10, message="the released copy")
    with Consumer(origin.send_dsn, context=context) as consumer:
        for _ in range(2):
            message = consumer.receive(10)
            assert message is not None
            message.ack()
    peer.wait_stats(lambda s: s["replicas_held"] == 0, 10, message="copies removed")


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
