"""Topics and consumer groups on real nodes: --consume-dsn, one stored copy, many readers."""

from __future__ import annotations

import re

import pytest
import zmq

from pzq.client import Consumer, ConsumeRefused, GroupConsumer, Producer
from pzq.protocol import consume as wire
from tests.support.harness import NodeProcess, scrape_metrics, wait_until

FAST = ("--ack-timeout", "30s", "--reaper-frequency", "100ms", "--consume-heartbeat", "1s")


@pytest.fixture
def group_node(start_node) -> NodeProcess:
    return start_node(*FAST, consume=True)


def produce(node: NodeProcess, context: zmq.Context, bodies: list[bytes], topic: str = "orders",
            tag: str | None = None) -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for body in bodies:
            producer.send([body], topic=topic, tag=tag)
        assert all(ack.ok for ack in producer.flush(15))


def drain(consumer: Consumer, count: int, ack: bool = True, timeout: float = 10) -> list[bytes]:
    got = []
    for _ in range(count):
        message = consumer.receive(timeout)
        assert message is not None, f"only {len(got)} of {count} delivered"
        got.append(message.parts[0])
        if ack:
            message.ack()
    return got


def topic_figures(node: NodeProcess, topic: str = "orders") -> dict:
    return node.stats()["topics"][topic]


def test_three_groups_each_receive_every_message_once(group_node, context):
    produce(group_node, context, [b"first"])  # the topic exists once used
    bodies = [b"m%d" % n for n in range(60)]
    consumers = [GroupConsumer(group_node.consume_dsn, "orders", name, window=10,
                               context=context) for name in ("billing", "audit", "search")]
    try:
        produce(group_node, context, bodies)
        groups = topic_figures(group_node)["groups"]
        assert [groups[name]["backlog"] for name in ("billing", "audit", "search")] == [61] * 3
        for consumer in consumers:
            got = drain(consumer, 61)
            assert got == [b"first", *bodies]
            assert consumer.receive(0.3) is None  # nothing twice
    finally:
        for consumer in consumers:
            consumer.close()
    # named groups alone read the topic: it shrinks as they ACK, and --send-dsn (which
    # nobody reads here) keeps no copy
    group_node.wait_stats(lambda s: s["messages"] == 0 and s["topics"]["orders"]["messages"] == 0)
    with Consumer(group_node.send_dsn, context=context) as plain:
        assert plain.receive(0.3) is None


def test_send_dsn_keeps_a_topic_it_read_before_the_groups_came(group_node, context):
    produce(group_node, context, [b"early"])
    with Consumer(group_node.send_dsn, context=context) as plain:
        assert drain(plain, 1) == [b"early"]  # read there: --send-dsn keeps the topic
        group_node.wait_stats(lambda s: s["topics"]["orders"]["default_rule"] == "all")
        with GroupConsumer(group_node.consume_dsn, "orders", "audit", context=context) as audit:
            produce(group_node, context, [b"late"])
            assert drain(audit, 1) == [b"late"] and drain(plain, 1) == [b"late"]
    group_node.wait_stats(lambda s: s["messages"] == 0)
    assert group_node.ask("TOPICS").startswith("orders messages=0 bytes=0 "
                                               "groups=default,audit\n")


def test_deleted_only_after_the_last_group_acks(group_node, context):
    produce(group_node, context, [b"a", b"b"])
    group_node.keep_default()
    with GroupConsumer(group_node.consume_dsn, "orders", "one", context=context) as one, \
            GroupConsumer(group_node.consume_dsn, "orders", "two", context=context) as two, \
            Consumer(group_node.send_dsn, context=context) as plain:
        drain(one, 2)
        drain(plain, 2)
        group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["one"]["acked"] == 2
                              and s["acked"] == 2)
        assert group_node.stats()["messages"] == 2  # "two" has not acked
        drain(two, 2)
        group_node.wait_stats(lambda s: s["messages"] == 0)


def test_two_consumers_in_a_group_share_without_overlap(group_node, context):
    produce(group_node, context, [b"x"])
    first = GroupConsumer(group_node.consume_dsn, "orders", "workers", window=5, context=context)
    second = GroupConsumer(group_node.consume_dsn, "orders", "workers", window=5,
                           context=context)
    try:
        produce(group_node, context, [b"m%d" % n for n in range(9)])
        held_first = [first.receive(5) for _ in range(5)]
        held_second = [second.receive(5) for _ in range(5)]
        keys_first = {message.key for message in held_first if message is not None}
        keys_second = {message.key for message in held_second if message is not None}
        assert len(keys_first) == 5 and len(keys_second) == 5
        assert not keys_first & keys_second
        assert first.receive(0.3) is None  # credits: 5 unacked each, no more
    finally:
        first.close()
        second.close()


def test_credits_never_exceeded(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(50)])
    with GroupConsumer(group_node.consume_dsn, "orders", "slow", window=3,
                       context=context) as consumer:
        held = [consumer.receive(5) for _ in range(3)]
        assert all(held)
        assert consumer.receive(0.5) is None
        figures = topic_figures(group_node)["groups"]["slow"]
        assert figures["inflight"] == 3 and figures["credits"] == 0
        held[0].ack()
        assert consumer.receive(5) is not None
        assert consumer.receive(0.3) is None


def test_many_deliveries_answered_in_one_ack_or_nack(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(8)])
    with GroupConsumer(group_node.consume_dsn, "orders", "batched", window=8,
                       context=context) as consumer:
        held = [consumer.receive(5) for _ in range(8)]
        assert all(held) and consumer.receive(0.3) is None  # the credits are used up
        consumer.nack_many(held[:3])  # given back: delivered again, before newer ones
        again = [consumer.receive(5) for _ in range(3)]
        assert [m.parts[0] for m in again] == [b"m0", b"m1", b"m2"]
        consumer.ack_many([*again, *held[3:]])
        wait_until(lambda: topic_figures(group_node)["groups"]["batched"]["backlog"] == 0)
        figures = topic_figures(group_node)["groups"]["batched"]
        assert figures["inflight"] == 0 and figures["credits"] == 8
        assert consumer.receive(0.3) is None and consumer.errors == []


def test_consumer_with_topic_and_group_speaks_the_consume_protocol(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(5)])
    group_node.keep_default()
    with Consumer(group_node.consume_dsn, topic="orders", group="billing", window=2,
                  filter="", start="earliest", context=context) as consumer:
        assert isinstance(consumer, GroupConsumer)
        held = [consumer.receive(5) for _ in range(2)]
        assert [message.parts[0] for message in held] == [b"m0", b"m1"]
        assert consumer.receive(0.5) is None  # window 2: no third while two are unacked
        figures = topic_figures(group_node)["groups"]["billing"]
        assert (figures["inflight"], figures["consumers"]) == (2, 1)
        for message in held:
            message.ack()
        assert drain(consumer, 3) == [b"m2", b"m3", b"m4"]
    group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["acked"] == 5)
    # without topic and group it is the original consumer on --send-dsn, as before
    with Consumer(group_node.send_dsn, context=context) as plain:
        assert type(plain) is Consumer
        assert sorted(drain(plain, 5)) == [b"m%d" % n for n in range(5)]


def test_consumer_group_options_are_checked(group_node, context):
    with pytest.raises(TypeError, match="both topic= and group="):
        Consumer(group_node.consume_dsn, topic="orders", context=context)
    with pytest.raises(TypeError, match="window= only with topic= and group="):
        Consumer(group_node.send_dsn, window=5, context=context)
    with pytest.raises(TypeError, match="timeout= only with .* receive.timeout"):
        Consumer(group_node.send_dsn, timeout=5, context=context)
    with pytest.raises(TypeError, match="window="):
        Consumer(group_node.consume_dsn, context, topic="orders", group="g")
    with pytest.raises(ConsumeRefused):
        Consumer(group_node.consume_dsn, topic="bad/name", group="g", context=context)


def test_disconnect_gives_deliveries_back_at_once(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(4)])
    gone = GroupConsumer(group_node.consume_dsn, "orders", "g", window=4, context=context)
    assert all(gone.receive(5) for _ in range(4))
    gone._socket.close(0)  # no BYE: the connection just goes
    with GroupConsumer(group_node.consume_dsn, "orders", "g", window=4,
                       context=context) as other:
        got = drain(other, 4, timeout=3)  # well inside the 30 s ack timeout
    assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_late_group_starts_where_asked(group_node, context):
    produce(group_node, context, [b"old1", b"old2"])
    with GroupConsumer(group_node.consume_dsn, "orders", "new", start="latest",
                       context=context) as latest, \
            GroupConsumer(group_node.consume_dsn, "orders", "all", start="earliest",
                          context=context) as earliest:
        produce(group_node, context, [b"new1"])
        assert drain(latest, 1) == [b"new1"]
        assert latest.receive(0.3) is None
        assert drain(earliest, 3) == [b"old1", b"old2", b"new1"]


def test_filtered_group_sees_only_its_tag(group_node, context):
    produce(group_node, context, [b"eu1"], tag="eu-west")
    with GroupConsumer(group_node.consume_dsn, "orders", "eu", filter="eu-*",
                       context=context) as eu, \
            GroupConsumer(group_node.consume_dsn, "orders", "us", filter="us",
                          context=context) as us, \
            Consumer(group_node.send_dsn, context=context) as plain:
        produce(group_node, context, [b"us1"], tag="us")
        produce(group_node, context, [b"eu2"], tag="eu-north")
        produce(group_node, context, [b"none"])
        assert drain(eu, 2) == [b"eu1", b"eu2"]
        assert drain(us, 1) == [b"us1"]
        assert eu.receive(0.3) is None and us.receive(0.1) is None
        group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["eu"]["backlog"] == 0
                              and s["topics"]["orders"]["groups"]["us"]["backlog"] == 0)
        # what no named group's filter takes stays for --send-dsn (nothing is stranded)
        assert drain(plain, 1) == [b"none"] and plain.receive(0.3) is None
        assert "groups=eu,us default=unclaimed" in group_node.ask("TOPICS")
        # what a filter leaves out counts as done for that group
        group_node.wait_stats(lambda s: s["messages"] == 0)
    # a consumer joining without a filter gets the group's; another filter is refused
    produce(group_node, context, [b"us2"], tag="us")
    produce(group_node, context, [b"eu3"], tag="eu-south")
    with GroupConsumer(group_node.consume_dsn, "orders", "eu", context=context) as joined:
        assert drain(joined, 1) == [b"eu3"] and joined.receive(0.3) is None
    with pytest.raises(ConsumeRefused, match="group eu of topic orders has filter 'eu-\\*', "
                                             "not 'us'"):
        with GroupConsumer(group_node.consume_dsn, "orders", "eu", filter="us",
                           context=context) as wrong:
            wrong.receive(1)


def test_topics_are_apart(group_node, context):
    produce(group_node, context, [b"o1"], topic="orders")
    produce(group_node, context, [b"c1"], topic="clicks")
    with GroupConsumer(group_node.consume_dsn, "clicks", "g", context=context) as clicks:
        produce(group_node, context, [b"o2"], topic="orders")
        produce(group_node, context, [b"c2"], topic="clicks")
        assert drain(clicks, 2) == [b"c1", b"c2"]
        assert clicks.receive(0.3) is None
    stats = group_node.wait_stats(lambda s: s["topics"]["clicks"]["messages"] == 0)["topics"]
    assert stats["orders"]["messages"] == 2  # --send-dsn's: nobody read it


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


def test_bad_requests_get_clear_errors_and_the_node_goes_on(group_node, context):
    produce(group_node, context, [b"x"])
    with pytest.raises(ConsumeRefused, match="no topic 'nope'"):
        GroupConsumer(group_node.consume_dsn, "nope", "g", context=context)
    with pytest.raises(ConsumeRefused, match="must be 1-255"):
        GroupConsumer(group_node.consume_dsn, "orders", "bad/name", context=context)
    with pytest.raises(ConsumeRefused, match="default is the consumers on --send-dsn"):
        GroupConsumer(group_node.consume_dsn, "orders", "default", context=context)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(group_node.consume_dsn)
    try:
        for request, reason in (
                ([b"CONSUME", b"orders"], b"CONSUME needs topic, group and window"),
                ([b"CONSUME", b"orders", b"g", b"0"], b"is not a number from 1"),
                ([b"CONSUME", b"orders", b"g", b"5", b"COLOUR:red"], b"is not FILTER:value"),
                ([b"ACK", b"whatever"], b"ACK before CONSUME"),
                ([b"FETCH"], b"unknown request 'FETCH'")):
            dealer.send_multipart(request)
            assert dealer.poll(5000)
            answer = dealer.recv_multipart()
            assert answer[0] == wire.ERROR and reason in answer[1], answer
            if request[0] == b"ACK":  # and its keys, to be sent again with a CONSUME
                assert dealer.poll(5000)
                assert dealer.recv_multipart() == [wire.REFUSED, wire.ACK, b"whatever"]
        dealer.send_multipart([b"CONSUME", b"orders", b"g", b"5"])
        assert dealer.poll(5000) and dealer.recv_multipart()[0] == wire.CONSUMING
        while dealer.poll(1000):
            if dealer.recv_multipart()[0] == wire.DELIVER:
                break
        dealer.send_multipart([b"ACK", b"not-a-key"])
        answer = wait_until(lambda: _next_non_heartbeat(dealer), 5)
        assert answer[0] == wire.ERROR and b"is not a pzq message key" in answer[1]
    finally:
        dealer.close()
    with GroupConsumer(group_node.consume_dsn, "orders", "g", context=context) as consumer:
        assert drain(consumer, 1) == [b"x"]  # given back when the dealer went


def _next_non_heartbeat(socket: zmq.Socket) -> list[bytes] | None:
    while socket.poll(100):
        frames = socket.recv_multipart()
        if frames[0] != wire.HEARTBEAT:
            return frames
    return None


def test_bad_topic_name_is_refused(group_node, context):
    with Producer(group_node.receive_dsn, context=context) as producer:
        ack = producer.produce([b"x"], headers=[b"TOPIC:../etc"])
    assert not ack.ok and b"must be 1-255" in ack.status_message


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
        assert float(row.split("│")[-2].replace(",", "")) > 0  # acked/s over the last minute
        listed = group_node.ask("TOPICS").splitlines()
        assert listed[0] == "orders messages=2 bytes=136 groups=billing default=unclaimed"
        assert listed[1].startswith("  group billing backlog=2 lag=") \
            and listed[1].endswith("consumers=1")
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


def test_delivery_headers_on_the_consume_endpoint(start_node, context):
    node = start_node(*FAST, "--delivery-headers", consume=True)
    produce(node, context, [b"x"], tag="eu")
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        message = consumer.receive(5)
        message.nack()
        again = consumer.receive(5)
    assert message.deliveries == 1 and again.deliveries == 2
    assert again.headers["TAG"] == "eu" and again.headers["TOPIC"] == "orders"


def test_archived_once_when_every_group_is_done_naming_the_groups(start_node, context,
                                                                  tmp_path):
    from pzq.archive.reader import ArchiveReader
    node = start_node(*FAST, "--archive-dir", str(tmp_path / "archive"), "--archive-dsn",
                      f"ipc://{tmp_path}/reader", "--flush-interval", "50", consume=True)
    produce(node, context, [b"o1", b"o2"])
    node.keep_default()
    produce(node, context, [b"p1"], topic="plain")
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing, \
            Consumer(node.send_dsn, context=context) as plain:
        drain(billing, 2)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["acked"] == 2)
        assert node.stats()["archive"]["archived"] == 0  # default has not acked
        drain(plain, 3)
        node.wait_stats(lambda s: s["archive"]["archived"] == 3 and s["messages"] == 0)
    node.wait_archive_durable()  # what a FETCH hands out
    with ArchiveReader(f"ipc://{tmp_path}/reader", "orders", context=context) as reader:
        orders = [message for _, message in reader.fetch(0)]
    with ArchiveReader(f"ipc://{tmp_path}/reader", "plain", context=context) as reader:
        plains = [message for _, message in reader.fetch(0)]
    assert [(m.parts, m.groups) for m in orders] == [((b"o1",), ("billing", "default")),
                                                     ((b"o2",), ("billing", "default"))]
    assert [(m.parts, m.groups) for m in plains] == [((b"p1",), ())]


def test_given_up_by_the_last_group_is_archived_as_a_dead_letter(start_node, context,
                                                                 tmp_path):
    from pzq.archive.format.files import read_topic
    node = start_node(*FAST, "--archive-dir", str(tmp_path / "archive"), "--max-deliveries",
                      "2", "--flush-interval", "50", consume=True)
    produce(node, context, [b"first"])  # the topic exists once used
    node.keep_default()
    with GroupConsumer(node.consume_dsn, "orders", "billing", window=1, start="latest",
                       context=context) as billing:
        produce(node, context, [b"poison", b"fine"])
        with Consumer(node.send_dsn, context=context) as plain:
            drain(plain, 3)  # default is done; billing still holds the last two
        node.wait_stats(lambda s: s["acked"] == 3)
        assert node.stats()["archive"]["archived"] == 1  # first: only default held it
        for _ in range(2):  # delivered twice, given back twice: given up
            poison = billing.receive(5)
            assert poison is not None and poison.parts == (b"poison",)
            poison.nack()
        assert drain(billing, 1) == [b"fine"]
        node.wait_stats(lambda s: s["messages"] == 0 and s["archive"]["archived"] == 3,
                        message="both deleted and archived")
    groups = node.stats()["topics"]["orders"]["groups"]["billing"]
    assert (groups["dead_lettered"], groups["acked"]) == (1, 1)
    assert node.stats()["dead_letters"] == 1  # kept, as default's are
    archived = wait_until(lambda: [m for _, m in read_topic(tmp_path / "archive", "orders")]
                          if len(list(read_topic(tmp_path / "archive", "orders"))) == 3
                          else None, 10, message="all three on disk")
    by_body = {message.parts: message for message in archived}
    poison, fine = by_body[(b"poison",)], by_body[(b"fine",)]
    assert (poison.outcome, poison.groups, poison.deliveries) == ("dead_letter",
                                                                 ("billing", "default"), 2)
    assert (fine.outcome, fine.groups) == ("acked", ("billing", "default"))


def test_a_dead_letter_the_archive_cannot_take_stays_in_the_dead_letters(start_node, context,
                                                                         tmp_path):
    from tests.integration.test_topic_admin import ask
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "orders").write_bytes(b"")  # the topic's folder cannot be made: writes fail
    node = start_node(*FAST, "--archive-dir", str(archive), "--max-deliveries", "1",
                      "--flush-interval", "50", consume=True)
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders billing",
                    "REMOVE GROUP orders default"):  # billing is the only holder
        assert not ask(node, command).startswith("ERROR"), command
    produce(node, context, [b"poison"])
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing:
        poison = billing.receive(5)
        assert poison is not None and poison.parts == (b"poison",)
        poison.nack()
        node.wait_stats(lambda s: s["dead_letters"] == 1 and s["archive"]["failures"] >= 1,
                        message="given up, the archive write failed")
        assert billing.receive(0.3) is None  # given up: not delivered again
    assert node.stats()["messages"] == 0
    assert poison.key.decode() in ask(node, "DEAD")
    ask(node, "REQUEUE ALL")  # and an operator can send it to the group again
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing:
        assert drain(billing, 1, ack=False) == [b"poison"]


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


def test_a_time_start_on_a_topic_without_a_log_finds_its_first_message(group_node, context):
    import time

    produce(group_node, context, [b"old1", b"old2"])  # no named group yet: no log
    since_us = time.time_ns() // 1000
    produce(group_node, context, [b"new1", b"new2"])
    with GroupConsumer(group_node.consume_dsn, "orders", "since", start=since_us,
                       context=context) as since:
        assert drain(since, 2) == [b"new1", b"new2"]
        assert since.receive(0.3) is None
    assert topic_figures(group_node)["groups"]["since"]["backlog"] == 0


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
