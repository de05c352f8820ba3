"""Real nodes: a copy a peer never got is sent again when the peer is back, so the
survivors deliver every ACKed message when the origin dies."""

from __future__ import annotations

import pytest

from pzq.client import Consumer, Producer
from tests.support.harness import NodeProcess, wait_until

pytestmark = pytest.mark.timeout(120)

TIMEOUT_NODES_US = 3_000_000  # long enough to send copies to a stopped peer before it is down
TIMEOUT_REPLICATION_US = 150_000


def start_three(start_node, tmp_path) -> list[NodeProcess]:
    endpoints = [f"ipc://{tmp_path}/node{i}.cluster" for i in range(3)]
    nodes = [start_node("--broadcast-dsn", endpoint,
                        "--nodes", ",".join(e for e in endpoints if e != endpoint),
                        "--replicas", "2", "--timeout-nodes", str(TIMEOUT_NODES_US),
                        "--timeout_replication", str(TIMEOUT_REPLICATION_US),
                        "--ack-timeout", "1000000", "--reaper-frequency", "100000")
             for endpoint in endpoints]
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    return nodes


def test_survivors_deliver_each_acked_message_once_also_those_a_peer_missed(
        start_node, context, closing, tmp_path):
    origin, first, stopped = start_three(start_node, tmp_path)
    bodies: list[bytes] = []
    with Producer(origin.receive_dsn, context=context) as producer:
        for i in range(5):
            bodies.append(b"before %d" % i)
            assert not producer.produce([bodies[-1]]).replication_failed
        stopped.kill()  # its copies are sent on until the origin sees it down
        failed = 0
        for i in range(8):  # one batch each: the holder lists take turns
            bodies.append(b"while stopped %d" % i)
            ack = producer.produce([bodies[-1]])
            assert ack.ok
            failed += ack.replication_failed
        assert failed >= 1, "the origin saw the stopped peer down too early"
        stopped.restart()
        origin.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                          timeout=30, message="the stopped peer up again")
        for i in range(5):
            bodies.append(b"after %d" % i)
            assert producer.produce([bodies[-1]]).ok
    # Every copy it missed came again: it holds as many as the other peer.
    stopped.wait_stats(lambda s: s["replicas_held"] == len(bodies), timeout=30,
                       message="the missed copies held")
    assert first.stats()["replicas_held"] == len(bodies)

    origin.kill()
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in (first, stopped)]
    delivered: list[bytes] = []

    def all_delivered() -> bool:
        for consumer in consumers:
            message = consumer.receive(0.01)
            if message is not None:
                delivered.append(message.parts[0])
                message.ack()
        return len(set(delivered)) == len(bodies)

    wait_until(all_delivered, 60, interval=0, message="every ACKed message delivered")
    for node in (first, stopped):
        node.wait_stats(lambda s: s["replicas_held"] == 0, message="every copy removed")
    for consumer in consumers:  # nothing more: each was delivered once
        assert consumer.receive(0.2) is None
    assert sorted(delivered) == sorted(bodies)
