"""An operator's commands and the dead letters in a cluster of real daemons: what an
operator removes, and what goes to the dead letters, leaves the holders of its copies
too, so a takeover after the origin dies does not deliver it again."""

from __future__ import annotations

from pzq.client import Consumer, GroupConsumer, Producer
from tests.cluster.test_cluster import ipc_endpoints
from tests.cluster.test_groups_cluster import declare, start_group_cluster, take_from_all
from tests.integration.test_groups import drain
from tests.integration.test_tools import tool
from tests.support.harness import scrape_metrics


def produce(node, context, bodies: list[bytes], topic: str | None = None) -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for body in bodies:
            producer.send([body], topic=topic)
        assert all(ack.ok and not ack.replication_failed for ack in producer.flush(30))


def settled(node) -> None:
    """Every REMOVE and DONE of the node confirmed by every peer."""
    node.wait_stats(lambda s: all(peer["removes_owed"] == 0 for peer in s["peers"]),
                    message="every REMOVE and DONE confirmed")


def taken_over(origin, survivor, closing, context) -> tuple[Consumer, GroupConsumer]:
    """Kill the origin; once the survivor takes over, its consumers of ``default``
    (--send-dsn) and of the group g1 of orders."""
    origin.kill()
    survivor.wait_stats(lambda s: s["takeovers"], message="a takeover")
    consumer = closing.enter_context(Consumer(survivor.send_dsn, context=context))
    g1 = closing.enter_context(GroupConsumer(survivor.consume_dsn, "orders", "g1",
                                             context=context))
    return consumer, g1


def test_emptied_and_removed_topics_leave_the_holders(start_node, context, closing,
                                                      tmp_path):
    origin, survivor = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2))
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1", "DECLARE TOPIC audit")
    plain = [b"plain %02d" % n for n in range(10)]
    produce(origin, context, plain)
    produce(origin, context, [b"order %02d" % n for n in range(20)], "orders")
    produce(origin, context, [b"audit %02d" % n for n in range(15)], "audit")
    survivor.wait_stats(lambda s: s["replicas_held"] == 45, message="every copy held")
    declare(origin, "EMPTY TOPIC orders", "REMOVE TOPIC audit")
    settled(origin)
    assert survivor.stats()["replicas_held"] == len(plain)
    consumer, g1 = taken_over(origin, survivor, closing, context)
    assert sorted(take_from_all([consumer], len(plain))) == plain
    assert consumer.receive(0.5) is None and g1.receive(0.1) is None
    survivor.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")


def test_emptied_and_removed_groups_are_not_served_by_a_takeover(start_node, context,
                                                                 closing, tmp_path):
    origin, survivor = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2))
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
            "DECLARE GROUP orders g2", "DECLARE GROUP orders g3",
            "REMOVE GROUP orders default")
    bodies = [b"%03d" % n for n in range(20)]
    produce(origin, context, bodies, "orders")
    survivor.wait_stats(lambda s: s["replicas_held"] == 20, message="every copy held")
    # g2 goes (the holders learn it in TOPICS, sent before the DONE that follows),
    # g1 is done with everything: g3 alone still reads the topic
    declare(origin, "REMOVE GROUP orders g2", "EMPTY GROUP orders g1")
    settled(origin)
    origin.kill()
    survivor.wait_stats(lambda s: s["takeovers"], message="a takeover")
    g1, g2, g3 = (closing.enter_context(GroupConsumer(survivor.consume_dsn, "orders", name,
                                                      context=context))
                  for name in ("g1", "g2", "g3"))
    assert sorted(drain(g3, 20)) == bodies
    survivor.wait_stats(lambda s: s["replicas_held"] == 0,
                        message="copies removed once g3 is done")
    assert g1.receive(0.3) is None and g2.receive(0.1) is None and g3.receive(0.1) is None


def give_up(consumer, count: int) -> None:
    """NACK ``count`` deliveries (with --max-deliveries 1: each goes to the dead letters)."""
    for _ in range(count):
        message = consumer.receive(10)
        assert message is not None
        message.nack()


def test_dead_letters_leave_the_holders_and_requeued_ones_are_copied(
        start_node, context, closing, tmp_path):
    origin, survivor = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2),
                                           "--max-deliveries", "1")
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
            "REMOVE GROUP orders default")
    plain = [b"plain %02d" % n for n in range(10)]
    orders = [b"order %02d" % n for n in range(5)]
    produce(origin, context, plain)
    produce(origin, context, orders, "orders")
    survivor.wait_stats(lambda s: s["replicas_held"] == 15, message="every copy held")
    with Consumer(origin.send_dsn, context=context) as consumer:
        give_up(consumer, 5)  # default gives up: the only group holding them
        drain(consumer, 5, ack=False)  # and the reaper gives up the others
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1:
        give_up(g1, len(orders))  # the last named group gives up
    origin.wait_stats(lambda s: s["dead_letters"] == 15, message="15 dead letters")
    settled(origin)
    survivor.wait_stats(lambda s: s["replicas_held"] == 0, message="dead letters' copies gone")
    declare(origin, "REQUEUE ALL")  # new messages, copied as new messages are
    survivor.wait_stats(lambda s: s["replicas_held"] == 15, message="requeued ones copied")
    consumer, g1 = taken_over(origin, survivor, closing, context)
    assert sorted(take_from_all([consumer], len(plain))) == plain
    assert sorted(drain(g1, len(orders))) == orders
    survivor.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")
    assert consumer.receive(0.3) is None and g1.receive(0.1) is None


def test_a_survivors_stats_name_what_a_takeover_serves_each_group(start_node, context,
                                                                  closing, tmp_path):
    # the two held deliveries stay in flight through every look below (at the cluster
    # tests' 1 s ack timeout a loaded machine saw them expire before the last one)
    origin, survivor = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2),
                                           "--ack-timeout", "60s")
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
            "DECLARE GROUP orders g2")
    origin_id = origin.stats()["node_id"]
    produce(origin, context, [b"%03d" % n for n in range(10)], "orders")
    origin.kill()
    survivor.wait_stats(lambda s: s["takeovers"], message="a takeover")
    g1 = closing.enter_context(GroupConsumer(survivor.consume_dsn, "orders", "g1", window=2,
                                             context=context))
    drain(g1, 4)
    drain(g1, 2, ack=False)  # the window is full: two out with the consumer
    stats = survivor.wait_stats(
        lambda s: s["taken_over"][origin_id]["topics"]["orders"]["g1"]["acked"] == 4,
        message="g1's ACKs counted under the origin taken over")
    taken = stats["taken_over"][origin_id]
    assert taken["replicas"] == 10 and not taken["paused"]
    g1_figures = taken["topics"]["orders"]["g1"]
    assert (g1_figures["delivered"], g1_figures["inflight"]) == (6, 2)
    assert g1_figures["oldest_unacked_seconds"] >= 0
    assert taken["topics"]["orders"]["g2"]["delivered"] == 0  # no consumer of g2 yet
    assert taken["default"]["inflight"] == 0
    # not counted as the survivor's own group g1, nor as the node's (default's) work
    assert stats["topics"]["orders"]["groups"]["g1"]["acked"] == 0 and stats["acked"] == 0
    # wide enough that the cell is not wrapped (the column's head is the monitor's
    # endpoint, a temporary path of any length)
    shown = tool("pzq-monitor", "--dsn", survivor.monitor_dsn, columns=400)
    assert shown.returncode == 0, shown.stderr
    assert f"{origin_id}: 10 copies, 2 in flight" in shown.stdout
    metrics = scrape_metrics(survivor.monitor_dsn)
    labels = (f'monitor="{survivor.monitor_dsn}",node="{stats["node_id"]}",'
              f'origin="{origin_id}"')
    assert f"pzq_takeover_replicas{{{labels}}} 10.0" in metrics
    assert f"pzq_takeover_messages_inflight{{{labels}}} 2.0" in metrics
