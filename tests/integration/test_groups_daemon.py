"""Topics and consumer groups where a daemon is the point: a SIGKILL and the restart
after it, and the command-line tools as a user runs them (the flows without a process
boundary run in process, in test_groups.py)."""

from __future__ import annotations

import re

import pytest
import zmq

from pzq.client import Consumer, GroupConsumer, Producer
from tests.integration.test_groups import FAST, drain, produce, topic_figures
from tests.support.harness import NodeProcess, scrape_metrics


@pytest.fixture
def group_node(start_node) -> NodeProcess:
    return start_node(*FAST, consume=True)


def test_restart_after_sigkill_keeps_every_group_place(group_node, context):
    produce(group_node, context, [b"start"])
    bodies = [b"m%d" % n for n in range(40)]
    with GroupConsumer(group_node.consume_dsn, "orders", "a", context=context) as a, \
            GroupConsumer(group_node.consume_dsn, "orders", "b", context=context) as b:
        produce(group_node, context, bodies)
        acked_a = drain(a, 25)
        acked_b = drain(b, 10)
        group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["a"]["acked"] == 25
                              and s["topics"]["orders"]["groups"]["b"]["acked"] == 10)
        group_node.kill()
    group_node.restart()
    groups = topic_figures(group_node)["groups"]
    assert (groups["a"]["backlog"], groups["b"]["backlog"]) == (41 - 25, 41 - 10)
    everything = [b"start", *bodies]
    with GroupConsumer(group_node.consume_dsn, "orders", "a", context=context) as a, \
            GroupConsumer(group_node.consume_dsn, "orders", "b", context=context) as b:
        rest_a = drain(a, 41 - 25)
        rest_b = drain(b, 41 - 10)
        assert a.receive(0.3) is None and b.receive(0.1) is None
    assert acked_a + rest_a == everything
    assert acked_b + rest_b == everything


def test_acks_out_of_order_before_a_sigkill_strand_nothing(group_node, context):
    """One consumer holds the first message while another ACKs the next 249: after a
    SIGKILL the group's read met 100 done messages in a row, took them for the end
    and delivered 1 of the 151 left (the rest stayed stored for good)."""
    bodies = [b"m%d" % n for n in range(400)]
    produce(group_node, context, bodies)
    with GroupConsumer(group_node.consume_dsn, "orders", "g", window=1,
                       context=context) as holder:
        assert drain(holder, 1, ack=False) == bodies[:1]
        with GroupConsumer(group_node.consume_dsn, "orders", "g", context=context) as acker:
            assert drain(acker, 249) == bodies[1:250]
            group_node.wait_stats(
                lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 249)
            group_node.kill()
    group_node.restart()
    with GroupConsumer(group_node.consume_dsn, "orders", "g", context=context) as again:
        rest = drain(again, 151)
        assert again.receive(0.3) is None
    assert rest == bodies[:1] + bodies[250:]


@pytest.mark.parametrize("endpoint", ["consume", "send"])
def test_delivery_counts_grow_across_a_sigkill(start_node, context, endpoint):
    """A message out at a SIGKILL comes again with a higher count, for a named group
    and for default (both came again with DELIVERY:1, so --max-deliveries could not
    count a message that crashes its consumers)."""
    node = start_node(*FAST, "--delivery-headers", consume=True)
    produce(node, context, [b"a", b"b"])
    with consumer_of(node, context, endpoint) as consumer:
        first = [consumer.receive(10) for _ in range(2)]
        assert [message.deliveries for message in first] == [1, 1]
        first[1].nack()
        again = consumer.receive(10)
        assert (again.parts[0], again.deliveries) == (b"b", 2)
        produce(node, context, [b"c"])  # a batch after the deliveries: they are kept
        node.kill()
    node.restart()
    with consumer_of(node, context, endpoint) as consumer:
        counts = {}
        while len(counts) < 3:
            message = consumer.receive(10)
            assert message is not None, f"only {sorted(counts)} came again"
            counts[message.parts[0]] = message.deliveries
    assert counts[b"a"] == 2 and counts[b"b"] == 3 and counts[b"c"] >= 1


def consumer_of(node: NodeProcess, context: zmq.Context, endpoint: str) -> Consumer:
    if endpoint == "send":
        return Consumer(node.send_dsn, context=context)
    return GroupConsumer(node.consume_dsn, "orders", "g", context=context)


def test_command_line_tools_speak_topics_and_groups(group_node):
    from tests.integration.test_tools import tool
    produced = tool("pzq-produce", "--dsn", group_node.receive_dsn, "--topic", "orders",
                    "--tag", "eu", stdin="a\nb\n")
    assert produced.returncode == 0, produced.stderr
    tool("pzq-produce", "--dsn", group_node.receive_dsn, "--topic", "orders", "--tag", "us",
         stdin="c\n")
    consumed = tool("pzq-consume", "--dsn", group_node.consume_dsn, "--topic", "orders",
                    "--group", "eu-only", "--filter", "eu", "--idle-timeout", "1")
    assert consumed.returncode == 0, consumed.stderr
    assert [line.split(" ")[-1] for line in consumed.stdout.splitlines()] == ["a", "b"]
    refused = tool("pzq-consume", "--dsn", group_node.consume_dsn, "--topic", "ordres",
                   "--group", "g", "--idle-timeout", "1")
    assert refused.returncode == 1
    assert "no topic 'ordres' (topics: orders)" in refused.stderr


def test_sigkill_mid_stream_loses_nothing_for_any_group(group_node, context):
    produce(group_node, context, [b"start"])
    seen: dict[str, set[bytes]] = {"a": set(), "b": set(), "c": set()}
    acked_by_node: set[bytes] = {b"start"}  # bodies the node ACKed "1" to the producer
    body_of: dict[bytes, bytes] = {}
    consumers = {name: GroupConsumer(group_node.consume_dsn, "orders", name, window=20,
                                     context=context) for name in seen}
    producer = Producer(group_node.receive_dsn, window=50, context=context)
    try:
        for n in range(400):
            body_of[producer.send([b"m%d" % n], topic="orders")] = b"m%d" % n
            acked_by_node |= {body_of[ack.msg_id] for ack in producer.acks() if ack.ok}
            for name, consumer in consumers.items():
                message = consumer.receive(0 if n % 4 else 0.01)
                if message is not None and (name != "c" or n % 3):
                    seen[name].add(message.parts[0])
                    message.ack()
        group_node.kill()  # producer ACKs, consumer ACKs and deliveries all in flight
    finally:
        for consumer in consumers.values():
            consumer._links.close()  # (its monitor: closing the consumer ends it first)
            consumer._socket.close(0)
        producer.close()
    stored = {b"start"} | {b"m%d" % n for n in range(400)}
    group_node.restart()
    for name in seen:
        with GroupConsumer(group_node.consume_dsn, "orders", name, window=50,
                           context=context) as consumer:
            while (message := consumer.receive(1.0)) is not None:
                seen[name].add(message.parts[0])
                message.ack()
    # every message stored before the kill reached every group (producer ACKs that were
    # lost in the kill may leave a message stored and unACKed: it is delivered too)
    assert len(acked_by_node) > 300
    for name, bodies in seen.items():
        assert acked_by_node <= bodies, (name, sorted(acked_by_node - bodies)[:5])
        assert bodies <= stored
    # the named groups alone read the topic: once each ACKed all, nothing is kept
    group_node.wait_stats(lambda s: s["topics"]["orders"]["messages"] == 0)


def test_figures_per_topic_and_group_in_pzq_monitor_and_the_exporter(group_node, context):

    from tests.integration.test_tools import tool
    produce(group_node, context, [b"a", b"b", b"c"])
    with GroupConsumer(group_node.consume_dsn, "orders", "billing", window=5,
                       context=context) as consumer:
        drain(consumer, 1)
        held = consumer.receive(5)
        assert held is not None
        orders = group_node.wait_stats(
            lambda s: s["topics"]["orders"]["groups"]["billing"]["acked"] == 1)["topics"]["orders"]
        # rates per second since the group's and the topic's first sample (the node's own)
        assert 0 < orders["groups"]["billing"]["rates"]["acked_60s"] \
            <= orders["groups"]["billing"]["rates"]["delivered_60s"]
        assert orders["rates"]["received_60s"] > 0
        latency = orders["groups"]["billing"]["ack_latency_ms"]  # of the one ACK
        assert latency["samples"] == 1 and latency["p50"] == latency["max"] > 0
        assert set(orders["rates"]) == {"received_1s", "received_60s"}
        shown = tool("pzq-monitor", "--dsn", group_node.monitor_dsn)
        assert shown.returncode == 0, shown.stderr
        assert "topics and groups" in shown.stdout
        row = next(line for line in shown.stdout.splitlines() if "billing" in line)
        assert row.split("│")[4].strip() == "2"  # backlog: c, and b held unacked
        assert row.split("│")[12].strip().endswith(("ms", "s"))  # lag / oldest: its age
        assert float(row.split("│")[-2].replace(",", "")) > 0  # acked/s over the last minute
        listed = group_node.ask("TOPICS").splitlines()
        assert re.fullmatch(r"orders messages=2 bytes=136 groups=billing default=unclaimed "
                            r"oldest_seconds=\d+(\.\d+)?", listed[0]), listed[0]
        assert re.fullmatch(r"  group billing backlog=2 lag=\d+ .* consumers=1 "
                            r"lag_seconds=\d+(\.\d+)?", listed[1]), listed[1]
        assert re.fullmatch(r"    consumer [0-9a-f]+ held=[12] window=5 idle_ms=\d+", listed[2])
        metrics = scrape_metrics(group_node.monitor_dsn)
    node_id = group_node.stats()["node_id"]
    labels = f'group="billing",monitor="{group_node.monitor_dsn}",node="{node_id}"'
    assert f'pzq_group_backlog{{{labels},topic="orders"}} 2.0' in metrics
    inflight_line = f'pzq_group_messages_inflight{{{labels},topic="orders"}} '
    inflight = float(next(line for line in metrics.splitlines()
                          if line.startswith(inflight_line)).split()[-1])
    assert f'pzq_group_lag{{{labels},topic="orders"}} {2.0 - inflight}' in metrics
    assert f'pzq_group_messages_delayed{{{labels},topic="orders"}} 0.0' in metrics
    assert f'pzq_group_acked_total{{{labels},topic="orders"}} 1.0' in metrics
    assert (f'pzq_topic_messages_stored{{monitor="{group_node.monitor_dsn}",node="{node_id}",'
            'topic="orders"} 2.0') in metrics  # a went at billing's ACK: nobody else holds it
    assert f'pzq_group_longest_consumer_idle_seconds{{{labels},topic="orders"}} ' in metrics


def test_sigkill_during_a_new_groups_backfill_loses_nothing(group_node, context):
    from pzq.client import request_monitor

    bodies = [b"m%d" % n for n in range(12_000)]  # more than two backfill chunks
    produce(group_node, context, bodies)
    answer = request_monitor(group_node.monitor_dsn, "DECLARE GROUP orders late", timeout=10)
    assert answer.startswith(b"group late of topic orders"), answer
    group_node.kill()  # the backfill of the stored messages is under way
    group_node.restart()
    group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["late"]["backlog"]
                          == len(bodies))
    with GroupConsumer(group_node.consume_dsn, "orders", "late", window=1000,
                       context=context) as late:
        assert drain(late, len(bodies)) == bodies
        assert late.receive(0.2) is None


TAGS = ("eu-west", "us", "eu-north", "us")


def test_each_default_rule_holds_across_sigterm_and_sigkill_restarts(group_node, context):
    """One topic with the group ``jobs`` (filter eu-*) goes through each ``default``
    rule: before and after a SIGTERM and a SIGKILL restart, --send-dsn gets exactly
    what the rule holds and ``jobs`` exactly its own (after a restart --send-dsn got
    every message of a topic only a named group holds, while TOPICS still said
    default=unclaimed). Nothing is ACKed but the end markers, so each restart
    delivers it all again."""
    assert group_node.ask("DECLARE TOPIC t").startswith("topic ")
    assert group_node.ask("DECLARE GROUP t jobs filter=eu-*").startswith("group ")
    for_default: list[bytes] = []
    for_jobs: list[bytes] = []
    stored = 0
    for rule in ("unclaimed", "all", "none"):
        if rule == "all":  # from the next message on, beside jobs
            assert group_node.ask("DECLARE GROUP t default").startswith("group default")
        if rule == "none":  # and what only default held goes
            assert group_node.ask("REMOVE GROUP t default").startswith("removed group")
            stored -= sum(b" us" in body for body in for_default)
            for_default = []
        bodies = [f"{rule} {tag}".encode() for tag in TAGS]
        produce_tagged(group_node, context, bodies)
        stored += len(bodies)
        for_jobs += [body for body in bodies if b" eu-" in body]
        if rule != "none":
            for_default += [body for body in bodies if rule == "all" or b" us" in body]
        for restart in (None, group_node.stop, group_node.kill):
            if restart is not None:
                # the end markers' ACKs are written: only the data is left to come again
                group_node.wait_stats(lambda s, stored=stored: s["messages"] == stored)
                restart()
                group_node.restart()
            assert topic_figures(group_node, "t")["default_rule"] == rule
            end = f"end {rule} {restart.__name__ if restart else 'start'}".encode()
            produce(group_node, context, [end], topic="t", tag="eu-end")  # t's last
            produce(group_node, context, [end])  # --send-dsn's last: it reads in seq order
            # --send-dsn's earlier deliveries stay out until their deadline (30 s), as
            # the original protocol has it: until a restart it gets the new ones
            wanted = for_default if restart else [body for body in for_default
                                                  if body in bodies]
            with Consumer(group_node.send_dsn, context=context) as plain:
                got = until_end(plain, end, ends=2 if rule == "all" else 1)
                assert got == sorted(wanted), f"--send-dsn: {end.decode()}"
            # what comes next is for the next connection: until the node has seen this
            # one go, --send-dsn may still hand it one (out then until its deadline)
            group_node.wait_stats(lambda s: s["consumers_connected"] == 0)
            with GroupConsumer(group_node.consume_dsn, "t", "jobs", filter="eu-*",
                               context=context) as jobs:
                assert until_end(jobs, end) == sorted(for_jobs), f"jobs: {end.decode()}"


def produce_tagged(node: NodeProcess, context: zmq.Context, bodies: list[bytes]) -> None:
    """Each body to topic t, tagged with its second word."""
    for body in bodies:
        produce(node, context, [body], topic="t", tag=body.split()[1].decode())


def until_end(consumer: Consumer, end: bytes, ends: int = 1) -> list[bytes]:
    """The bodies delivered until the ``ends``-th end marker (ACKed, the others not),
    sorted."""
    got = []
    while ends:
        message = consumer.receive(10)
        assert message is not None, f"no {end!r} after {sorted(got)}"
        if message.parts[0] == end:
            message.ack()
            ends -= 1
        else:
            got.append(message.parts[0])
    return sorted(got)
