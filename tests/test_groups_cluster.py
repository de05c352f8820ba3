"""Consumer groups in a cluster of real daemons: a takeover serves the group default
(--send-dsn) of the dead origin's messages, and the origin's named groups resume with
nothing lost when it returns."""

from __future__ import annotations

from pzq.client import Consumer, GroupConsumer, Producer, request_monitor
from tests.harness import wait_until
from tests.test_cluster import ACK_TIMEOUT_US, TIMEOUT_NODES_US, ipc_endpoints
from tests.test_groups import drain


def start_group_cluster(start_node, endpoints: list[str]) -> list:
    nodes = []
    for endpoint in endpoints:
        others = ",".join(e for e in endpoints if e != endpoint)
        nodes.append(start_node(
            "--broadcast-dsn", endpoint, "--nodes", others, "--replicas", "2",
            "--timeout-nodes", str(TIMEOUT_NODES_US), "--ack-timeout", str(ACK_TIMEOUT_US),
            "--reaper-frequency", "100000", consume=True))
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    return nodes


def test_takeover_with_two_groups(start_node, context, closing, tmp_path):
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 3))
    origin = nodes[0]
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders g1",
                    "DECLARE GROUP orders g2"):
        assert not request_monitor(origin.monitor_dsn, command, 10).startswith(b"ERROR")
    bodies = [b"%03d" % n for n in range(100)]
    with Producer(origin.receive_dsn, window=50, context=context) as producer:
        for body in bodies:
            producer.send([body], topic="orders")
        assert all(ack.ok and not ack.replication_failed for ack in producer.flush(30))
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1:
        first = drain(g1, 40)
    origin.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g1"]["acked"] == 40)
    origin.kill()
    # the survivors take over the group default (--send-dsn) of the origin's messages
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes[1:]]
    taken: set[bytes] = set()

    def all_taken() -> bool:
        for consumer in consumers:
            message = consumer.receive(0.01)
            if message is not None:
                taken.add(message.parts[0])
                message.ack()
        return len(taken) == 100

    wait_until(all_taken, 30, interval=0, message="the survivors deliver every message")
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")
    # the origin returns: default is done with them, its named groups are not
    origin.restart()
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1, \
            GroupConsumer(origin.consume_dsn, "orders", "g2", context=context) as g2:
        assert first + drain(g1, 60) == bodies
        assert drain(g2, 100) == bodies
        assert g1.receive(0.3) is None
    origin.wait_stats(lambda s: s["messages"] == 0, message="deleted once all are done")
    with Consumer(origin.send_dsn, context=context) as plain:
        assert plain.receive(0.5) is None  # acked on the survivors: not delivered again


def take_from_all(consumers: list[Consumer], count: int) -> list[bytes]:
    """ACK what the consumers get until ``count`` messages came."""
    taken: list[bytes] = []

    def enough() -> bool:
        for consumer in consumers:
            message = consumer.receive(0.01)
            if message is not None:
                taken.append(message.parts[0])
                message.ack()
        return len(taken) >= count

    wait_until(enough, 30, interval=0, message=f"{count} messages from the survivors")
    return taken


def test_takeover_leaves_topics_default_does_not_read_to_their_groups(
        start_node, context, closing, tmp_path):
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 3))
    origin = nodes[0]
    for command in ("DECLARE TOPIC audit", "DECLARE GROUP audit g1",
                    "REMOVE GROUP audit default"):
        assert not request_monitor(origin.monitor_dsn, command, 10).startswith(b"ERROR")
    plain = [b"plain %02d" % n for n in range(20)]
    audit = [b"audit %02d" % n for n in range(20)]
    with Producer(origin.receive_dsn, window=50, context=context) as producer:
        for body in plain:
            producer.send([body])
        for body in audit:
            producer.send([body], topic="audit")
        assert all(ack.ok and not ack.replication_failed for ack in producer.flush(30))
    origin.kill()
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes[1:]]
    taken = take_from_all(consumers, len(plain))
    for node in nodes[1:]:  # the audit copies stay, held for g1, not sent to --send-dsn
        node.wait_stats(lambda s: s["replicas_held"] == len(audit), message="audit copies")
    for consumer in consumers:
        assert consumer.receive(0.5) is None
    assert sorted(taken) == plain
    origin.restart()
    with GroupConsumer(origin.consume_dsn, "audit", "g1", context=context) as g1:
        assert drain(g1, 20) == audit
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")
