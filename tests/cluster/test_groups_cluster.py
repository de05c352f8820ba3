"""Consumer groups in a cluster of real daemons: a takeover serves every group of the
dead origin's messages (default on --send-dsn, the named groups on --consume-dsn),
and the returning origin delivers no group again what it finished meanwhile."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from pzq import aio
from pzq.client import (
    Consumer,
    ConsumeRefused,
    GroupConsumer,
    Message,
    Producer,
    RoutedGroupConsumer,
    RouteTable,
    request_monitor,
)
from tests.cluster.test_cluster import ACK_TIMEOUT_US, TIMEOUT_NODES_US, ipc_endpoints
from tests.integration.test_groups import drain, produce
from tests.support.aio import run
from tests.support.harness import wait_until

REMOVED = "^group g of topic orders was removed$"
OTHER_FILTER = r"^group g of topic orders has filter 'eu-\*', not 'us-\*'$"
LONG_ACK_TIMEOUT = ("--ack-timeout", "60000000")  # a delivery back sooner: a BYE gave it


def start_group_cluster(start_node, endpoints: list[str], *extra: str) -> list:
    nodes = []
    replicas = str(min(2, len(endpoints) - 1))
    for endpoint in endpoints:
        others = ",".join(e for e in endpoints if e != endpoint)
        nodes.append(start_node(
            "--broadcast-dsn", endpoint, "--nodes", others, "--replicas", replicas,
            "--timeout-nodes", str(TIMEOUT_NODES_US), "--ack-timeout", str(ACK_TIMEOUT_US),
            # copies confirmed in time even on a loaded machine: these tests are about
            # takeovers, and assert that nothing was ACKed REPLICATION_FAILED
            "--timeout-replication", "2s",
            "--reaper-frequency", "100000", *extra, consume=True))
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    return nodes


def declare(node, *commands: str) -> None:
    for command in commands:
        assert not request_monitor(node.monitor_dsn, command, 10).startswith(b"ERROR")


def arrived(consumer: Consumer, wait: float) -> Iterator[Message]:
    """Deliveries of ``consumer``: waits up to ``wait`` s for the first, then takes what
    has arrived already without waiting."""
    message = consumer.receive(wait)
    while message is not None:
        yield message
        message = consumer.receive(0)


def take_groups(consumers: dict[str, list], wanted: dict[str, int],
                bulk: bool = False) -> dict[str, list[bytes]]:
    """ACK what each group's consumers get until every group has its count of
    different messages (with the 1 s ack timeout of these tests a loaded machine may
    deliver one again before its ACK is read); ``bulk``: a group consumer ACKs all
    that one read found in one ACK (the node then does them in bulk).

    Each pass ACKs all that a consumer has received, not one delivery: a survivor sends
    its whole share of ``default`` at once (a --send-dsn consumer prefetches), and one a
    pass, behind the other consumers' waits (~25 ms a pass once the groups have theirs),
    had left the last of 50 unread past the ack timeout. The node then rightly delivered
    them again, and the repeats, sent before the ACKs came, waited in the consumer for
    the check that nothing more comes."""
    got: dict[str, dict[bytes, None]] = {name: {} for name in consumers}

    def enough() -> bool:
        for name, group in consumers.items():
            for consumer in group:
                if bulk and isinstance(consumer, GroupConsumer):
                    messages = consumer.receive_many(50, 0.005)
                    while messages:
                        got[name].update(dict.fromkeys(m.parts[0] for m in messages))
                        consumer.ack_many(messages)
                        messages = consumer.receive_many(50, 0)
                    continue
                for message in arrived(consumer, 0.005):
                    got[name][message.parts[0]] = None
                    message.ack()
        return all(len(got[name]) >= count for name, count in wanted.items())

    wait_until(enough, 30, interval=0, message=f"{wanted} messages from the survivors")
    return {name: list(found) for name, found in got.items()}


def drain_distinct(consumer: GroupConsumer, count: int) -> list[bytes]:
    """ACK deliveries until ``count`` different messages came: with the 1 s ack timeout
    of these tests a loaded machine may deliver one again before its ACK is read."""
    got: dict[bytes, None] = {}
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.receive(1)
        if message is not None:
            got[message.parts[0]] = None
            message.ack()
    assert len(got) == count, f"only {len(got)} of {count} delivered"
    return list(got)


@pytest.mark.parametrize("bulk", [False, True], ids=["one-ack-each", "acks-in-bulk"])
def test_takeover_serves_every_group_and_the_origin_delivers_nothing_again(
        start_node, context, closing, tmp_path, bulk):
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 3))
    origin, survivors = nodes[0], nodes[1:]
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
            "DECLARE GROUP orders g2", "DECLARE GROUP orders default")
    bodies = [b"%03d" % n for n in range(60)]
    with Producer(origin.receive_dsn, window=50, context=context) as producer:
        for body in bodies:
            producer.send([body], topic="orders")
        assert all(ack.ok and not ack.replication_failed for ack in producer.flush(30))
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1:
        first = drain_distinct(g1, 20)
    origin.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g1"]["acked"] == 20)
    origin.wait_stats(lambda s: all(peer["removes_owed"] == 0 for peer in s["peers"]),
                      message="the holders marked what g1 is done with")
    origin.kill()
    for node in survivors:
        node.wait_stats(lambda s: s["takeovers"], message="a takeover")
    # every group of the origin's messages, on the survivors: g1 what it had left
    consumers = {
        "default": [Consumer(node.send_dsn, context=context) for node in survivors],
        **{name: [GroupConsumer(node.consume_dsn, "orders", name, context=context)
                  for node in survivors] for name in ("g1", "g2")}}
    for group in consumers.values():
        for consumer in group:
            closing.enter_context(consumer)
    got = take_groups(consumers, {"default": 60, "g1": 40, "g2": 60}, bulk)
    assert set(got["g1"]) == set(bodies) - set(first)
    assert set(got["g2"]) == set(got["default"]) == set(bodies)
    for node in survivors:
        node.wait_stats(lambda s: s["replicas_held"] == 0,
                        message="copies removed once every group is done")
    assert not any(consumer.receive(0.1) for group in consumers.values() for consumer in group)
    # the origin returns: every group finished every message elsewhere
    origin.restart()
    origin.wait_stats(lambda s: s["messages"] == 0, message="deleted: all done elsewhere")
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1, \
            GroupConsumer(origin.consume_dsn, "orders", "g2", context=context) as g2, \
            Consumer(origin.send_dsn, context=context) as plain:
        assert g1.receive(0.5) is None and g2.receive(0.1) is None
        assert plain.receive(0.1) is None
    for node in nodes:
        node.wait_stats(lambda s: all(peer["removes_owed"] == 0 for peer in s["peers"]),
                        message="every DONE and REMOVE confirmed")


def test_the_origin_resumes_what_a_group_left_during_the_takeover(
        start_node, context, closing, tmp_path):
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2))
    origin, survivor = nodes
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
            "DECLARE GROUP orders g2", "DECLARE GROUP orders default")
    bodies = [b"%03d" % n for n in range(30)]
    produce(origin, context, bodies)
    origin.kill()
    survivor.wait_stats(lambda s: s["takeovers"], message="a takeover")
    with GroupConsumer(survivor.consume_dsn, "orders", "g1", context=context) as g1:
        taken = drain(g1, 10)  # g1 takes some, g2 and default none
    survivor.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g1"]["consumers"] == 0,
                        message="the consumer's ACKs and BYE")
    stats = survivor.stats()
    assert stats["replicas_held"] == 30  # kept for the rest
    finished = stats["peers"][0]["removes_owed"]  # g1's dones owed to the origin
    assert finished == len(taken) or g1.errors  # fewer only if an ACK was refused
    origin.restart()
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1, \
            GroupConsumer(origin.consume_dsn, "orders", "g2", context=context) as g2:
        rest = drain(g1, len(bodies) - finished)
        assert len(set(rest)) == len(rest) and set(rest) | set(taken) == set(bodies)
        assert sorted(drain(g2, 30)) == bodies  # held back until the DONEs came
        assert g1.receive(0.3) is None
    with Consumer(origin.send_dsn, context=context) as plain:
        assert sorted(drain(plain, 30)) == bodies
    origin.wait_stats(lambda s: s["messages"] == 0, message="deleted once all are done")
    survivor.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")


def test_one_connection_gets_a_groups_own_and_taken_over_messages(
        start_node, context, tmp_path):
    origin, survivor = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2))
    for node in (origin, survivor):
        declare(node, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
                "DECLARE GROUP orders default")
    theirs = [b"origin %02d" % n for n in range(20)]
    ours = [b"survivor %02d" % n for n in range(5)]
    for node, bodies in ((origin, theirs), (survivor, ours)):
        produce(node, context, bodies)
    origin.kill()
    survivor.wait_stats(lambda s: s["takeovers"], message="a takeover")
    with GroupConsumer(survivor.consume_dsn, "orders", "g1", context=context) as g1:
        assert sorted(drain(g1, 25)) == sorted(theirs + ours)  # each ACK to its origin
        assert g1.receive(0.3) is None
    with Consumer(survivor.send_dsn, context=context) as plain:
        assert sorted(drain(plain, 25)) == sorted(theirs + ours)
    survivor.wait_stats(lambda s: s["messages"] == 0 and s["replicas_held"] == 0,
                        message="own messages deleted and copies removed")


def take_from_all(consumers: list[Consumer], count: int) -> list[bytes]:
    """ACK what the consumers get until ``count`` messages came (all each has received
    in a pass: see take_groups)."""
    taken: list[bytes] = []

    def enough() -> bool:
        for consumer in consumers:
            for message in arrived(consumer, 0.01):
                taken.append(message.parts[0])
                message.ack()
        return len(taken) >= count

    wait_until(enough, 30, interval=0, message=f"{count} messages from the survivors")
    return taken


def test_takeover_leaves_topics_default_does_not_read_to_their_groups(
        start_node, context, closing, tmp_path):
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 3))
    origin = nodes[0]
    # audit: default removed by an operator; orders: read by its named group alone
    declare(origin, "DECLARE TOPIC audit", "DECLARE GROUP audit g1",
            "REMOVE GROUP audit default", "DECLARE TOPIC orders", "DECLARE GROUP orders g2")
    plain = [b"plain %02d" % n for n in range(20)]
    audit = [b"audit %02d" % n for n in range(20)]
    orders = [b"orders %02d" % n for n in range(20)]
    with Producer(origin.receive_dsn, window=50, context=context) as producer:
        for body in plain:
            producer.send([body])
        for body in audit:
            producer.send([body], topic="audit")
        for body in orders:
            producer.send([body], topic="orders")
        assert all(ack.ok and not ack.replication_failed for ack in producer.flush(30))
    origin.kill()
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes[1:]]
    taken = take_from_all(consumers, len(plain))
    for node in nodes[1:]:  # the copies stay, held for g1 and g2, not sent to --send-dsn
        node.wait_stats(lambda s: s["replicas_held"] == len(audit) + len(orders),
                        message="audit and orders copies")
    for consumer in consumers:
        assert consumer.receive(0.5) is None
    assert sorted(taken) == plain
    origin.restart()
    with GroupConsumer(origin.consume_dsn, "audit", "g1", context=context) as g1, \
            GroupConsumer(origin.consume_dsn, "orders", "g2", context=context) as g2:
        assert drain(g1, 20) == audit and drain(g2, 20) == orders
    origin.wait_stats(lambda s: s["messages"] == 0, message="no copy kept for --send-dsn")
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")


def heard_since(node, since: float, gap: float) -> bool:
    """Whether ``node`` heard its peer at least ``gap`` seconds after ``since`` (so a
    heartbeat, and the TOPICS sent with it, left the peer after ``since``)."""
    heard = node.stats()["peers"][0]["last_heard_seconds"]
    return heard is not None and (time.monotonic() - since) - heard >= gap


def test_a_takeover_counts_on_from_the_origins_deliveries(start_node, context, tmp_path):
    """A message out with the origin's consumers when it died comes from the survivor
    with a count of at least 2, for default and for a named group (it said 1)."""
    origin, survivor = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2),
                                           "--delivery-headers")
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1",
            "DECLARE GROUP orders default")
    bodies = [b"%02d" % n for n in range(10)]
    produce(origin, context, bodies)
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1, \
            Consumer(origin.send_dsn, context=context) as plain:
        for consumer in (g1, plain):
            assert [consumer.receive(10).deliveries for _ in bodies] == [1] * len(bodies)
        produce(origin, context, [b"after"])  # a batch after the deliveries keeps them
        since = time.monotonic()
        wait_until(lambda: heard_since(survivor, since, 0.8), 10,
                   message="heartbeats (and TOPICS) after the batch")
        origin.kill()
    survivor.wait_stats(lambda s: s["takeovers"], message="a takeover")
    with GroupConsumer(survivor.consume_dsn, "orders", "g1", context=context) as g1, \
            Consumer(survivor.send_dsn, context=context) as plain:
        for consumer in (g1, plain):
            counts = {}
            while len(counts) < len(bodies) + 1:
                message = consumer.receive(10)
                assert message is not None, f"only {sorted(counts)} taken over"
                counts[message.parts[0]] = message.deliveries
                message.ack()
            assert [counts[body] for body in bodies] == [2] * len(bodies)


def heard_origin_since(node, origin_id: str, since: float, gap: float) -> bool:
    """Whether ``node`` heard the origin at least ``gap`` seconds after ``since``."""
    for peer in node.stats()["peers"]:
        if peer["node_id"] == origin_id:
            heard = peer["last_heard_seconds"]
            return heard is not None and (time.monotonic() - since) - heard >= gap
    return False


def take_counts(consumers: list[GroupConsumer], count: int) -> dict[bytes, int]:
    """The DELIVERY counts of the first ``count`` different messages the consumers get
    (none ACKed)."""
    counts: dict[bytes, int] = {}

    def enough() -> bool:
        for consumer in consumers:
            for message in arrived(consumer, 0.005):
                counts.setdefault(message.parts[0], message.deliveries)
        return len(counts) >= count

    wait_until(enough, 30, interval=0, message=f"{count} messages")
    return counts


def test_a_takeover_resumed_counts_on_from_what_the_origin_delivered_meanwhile(
        start_node, context, closing, tmp_path):
    """The origin dies, a survivor takes over and keeps a delivery out; the origin
    returns (the takeover pauses, waiting for that ACK), delivers more and dies again:
    the takeover resumes, and what the origin delivered while it was back comes with a
    count of 2 (it counted on from its first start, and said 1)."""
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 3), "--delivery-headers",
                                "--ack-timeout", "60s")  # nothing expires meanwhile
    origin, survivors = nodes[0], nodes[1:]
    origin_id = origin.stats()["node_id"]
    declare(origin, "DECLARE TOPIC orders", "DECLARE GROUP orders g1")
    produce(origin, context, [b"first"])
    origin.kill()
    for node in survivors:
        node.wait_stats(lambda s: s["takeovers"], message="a takeover")
    taking = [closing.enter_context(GroupConsumer(node.consume_dsn, "orders", "g1",
                                                  context=context)) for node in survivors]
    assert take_counts(taking, 1) == {b"first": 1}  # out with a survivor's consumer
    origin.restart()
    for node in survivors:
        node.wait_stats(lambda s: not s["takeovers"], message="the takeover paused")
    with GroupConsumer(origin.consume_dsn, "orders", "g1", context=context) as g1:
        for body in (b"second", b"third"):  # two batches: each survivor first for one
            produce(origin, context, [body])
        assert take_counts([g1], 2) == {b"second": 1, b"third": 1}
        produce(origin, context, [b"after"])  # a batch after the deliveries keeps them
        since = time.monotonic()
        for node in survivors:
            wait_until(lambda node=node: heard_origin_since(node, origin_id, since, 0.8), 10,
                       message="heartbeats (and TOPICS) after the batch")
        origin.kill()
    for node in survivors:
        node.wait_stats(lambda s: s["takeovers"], message="the takeover resumed")
    counts = take_counts(taking, 3)
    assert {body: counts[body] for body in (b"second", b"third")} == {b"second": 2,
                                                                      b"third": 2}


def _every_consume_endpoint_known(nodes) -> None:
    def known() -> bool:
        table = json.loads(request_monitor(nodes[1].monitor_dsn, "ROUTES", 10))
        return len(table["nodes"]) == len(nodes) and all(
            "consume" in entry for entry in table["nodes"].values())
    wait_until(known, 20, message="the route table names every node's consume endpoint")


def _refused_on_one_node(nodes, context) -> None:
    """Both nodes hold deliveries out to the routed consumer's members when the first
    node's group is removed: the second's, four times as many, are still there to take
    once the first's refusal is read (behind its deliveries)."""
    for node, count in zip(nodes, (10, 40), strict=True):
        declare(node, "DECLARE TOPIC orders", "DECLARE GROUP orders g")
        produce(node, context, [b"%s-%d" % (node.monitor_dsn.encode(), n) for n in range(count)])
        node.wait_stats(lambda s, count=count:
                        s["topics"]["orders"]["groups"]["g"]["inflight"] == count,
                        message="every delivery out to the node's member")
    declare(nodes[0], "REMOVE GROUP orders g")


def test_routed_group_consumer_raises_consume_refused_at_every_receive_after(
        start_node, context, tmp_path):
    """After one node refused the group, the next receive took another node's delivery."""
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2))
    _every_consume_endpoint_known(nodes)
    with RoutedGroupConsumer(nodes[1].monitor_dsn, "orders", "g", context=context) as consumer:
        assert len(consumer.consumers) == 2
        _refused_on_one_node(nodes, context)
        deadline = time.monotonic() + 15
        with pytest.raises(ConsumeRefused, match=REMOVED):
            while time.monotonic() < deadline:
                consumer.receive(0.2)
        for _ in range(4):
            with pytest.raises(ConsumeRefused, match=REMOVED):
                consumer.receive(0.2)
        with pytest.raises(ConsumeRefused, match=REMOVED):
            consumer.receive_many(10, 0.2)


def test_asyncio_routed_group_consumer_raises_consume_refused_at_every_receive_after(
        start_node, context, aio_context, tmp_path):
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2))
    _every_consume_endpoint_known(nodes)

    async def main() -> None:
        async with aio.RoutedGroupConsumer(nodes[1].monitor_dsn, "orders", "g",
                                           context=aio_context) as consumer:
            assert len(consumer.consumers) == 2
            _refused_on_one_node(nodes, context)
            deadline = time.monotonic() + 15
            with pytest.raises(ConsumeRefused, match=REMOVED):
                while time.monotonic() < deadline:
                    await consumer.receive(0.2)
            for _ in range(4):
                with pytest.raises(ConsumeRefused, match=REMOVED):
                    await consumer.receive(0.2)
            with pytest.raises(ConsumeRefused, match=REMOVED):
                await consumer.receive_many(10, 0.2)

    run(main())


def _refused_at_join(start_node, tmp_path, context, every: bool = False):
    """Two nodes: the one a routed consumer joins first has group g (filter us-*) with
    ten deliveries for it; the one joined last has g with another filter (eu-*), so
    refuses a consumer of us-* (``every``: both have eu-*). Returns the first node."""
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2), *LONG_ACK_TIMEOUT)
    _every_consume_endpoint_known(nodes)
    order = RouteTable(nodes[0].monitor_dsn).every("consume")
    first, last = ({node.consume_dsn: node for node in nodes}[endpoint]
                   for endpoint in (order[0], order[-1]))
    declare(first, "DECLARE TOPIC orders",
            f"DECLARE GROUP orders g filter={'eu-*' if every else 'us-*'}")
    produce(first, context, [b"m%d" % n for n in range(10)], tag="us-1")
    declare(last, "DECLARE TOPIC orders", "DECLARE GROUP orders g filter=eu-*")
    return first


def _let_go(node) -> None:
    """The routed consumer's member on ``node`` said BYE: what it held is back at once
    (not at the ack timeout, a minute)."""
    node.wait_stats(lambda s: (s["topics"]["orders"]["groups"]["g"]["consumers"],
                               s["topics"]["orders"]["groups"]["g"]["inflight"]) == (0, 0),
                    message="the joined node's consumer gone, its deliveries back")


def test_routed_group_consumer_raises_consume_refused_at_join(start_node, context,
                                                              tmp_path):
    first = _refused_at_join(start_node, tmp_path, context)
    with pytest.raises(ConsumeRefused, match=OTHER_FILTER):
        RoutedGroupConsumer(first.monitor_dsn, "orders", "g", filter="us-*", context=context)
    _let_go(first)


@pytest.mark.parametrize("every", [False, True], ids=["one node refuses", "every node"])
def test_asyncio_routed_group_consumer_raises_consume_refused_at_join_and_after(
        start_node, context, aio_context, tmp_path, every):
    """It said "no node ... has a consume endpoint" when every node refused, and joined
    the others alone when one did."""
    first = _refused_at_join(start_node, tmp_path, context, every)

    async def main() -> None:
        consumer = aio.RoutedGroupConsumer(first.monitor_dsn, "orders", "g", filter="us-*",
                                           context=aio_context)
        try:
            with pytest.raises(ConsumeRefused, match=OTHER_FILTER):
                async with consumer:
                    pass
            await asyncio.to_thread(_let_go, first)
            for _ in range(2):
                with pytest.raises(ConsumeRefused, match=OTHER_FILTER):
                    await consumer.receive(0.2)
            with pytest.raises(ConsumeRefused, match=OTHER_FILTER):
                await consumer.receive_many(10, 0.2)
            with pytest.raises(ConsumeRefused, match=OTHER_FILTER):
                await consumer.join()
        finally:
            await consumer.close()

    run(main())


def _group_g(stats: dict) -> dict:
    return stats["topics"]["orders"]["groups"]["g"]


def test_asyncio_routed_group_consumer_refused_keeps_the_other_nodes_deliveries_till_close(
        start_node, context, aio_context, tmp_path):
    """After the first node's refusal the second node's deliveries stay out to the routed
    consumer: those it took may still be ACKed, and close() gives the rest back at once
    (a BYE), not at the ack timeout (a minute)."""
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2), *LONG_ACK_TIMEOUT)
    _every_consume_endpoint_known(nodes)

    async def main() -> None:
        consumer = aio.RoutedGroupConsumer(nodes[1].monitor_dsn, "orders", "g",
                                           context=aio_context)
        await consumer.join()
        await asyncio.to_thread(_refused_on_one_node, nodes, context)
        taken: list[aio.Message] = []
        deadline = time.monotonic() + 15
        with pytest.raises(ConsumeRefused, match=REMOVED):
            while time.monotonic() < deadline:
                taken += await consumer.receive_many(1, 0.2)
        second = [m for m in taken if m.parts[0].startswith(nodes[1].monitor_dsn.encode())]
        assert second, "the second node's turns came before the refusal"
        assert _group_g(nodes[1].stats())["inflight"] == 40
        await consumer.ack_many(second)
        await asyncio.to_thread(nodes[1].wait_stats, lambda s: _group_g(s)["inflight"]
                                == 40 - len(second), 10, "the ACKs after the refusal")
        await consumer.close()
        await asyncio.to_thread(nodes[1].wait_stats, lambda s: _group_g(s)["inflight"] == 0,
                                10, "the rest back at close, not at the ack timeout")

    run(main())


DEAD_COUNTED_UP = ("--timeout-nodes", "30000000")  # a dead node stays in the table 30 s
LIVE_NODES_WITHIN_S = 4.0  # a join of the dead node (3 s to give up, twice) not waited out


def _one_node_just_killed(start_node, context, tmp_path) -> tuple[list, dict[int, set[bytes]]]:
    """Three nodes with 100 deliveries each for group g; the last SIGKILLed, still
    counted up by its peers (and so in the route table). Returns the nodes and each
    one's bodies by index."""
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 3), *DEAD_COUNTED_UP)
    _every_consume_endpoint_known(nodes)
    bodies = {}
    for index, node in enumerate(nodes):
        bodies[index] = {b"n%d-%d" % (index, n) for n in range(100)}
        declare(node, "DECLARE TOPIC orders", "DECLARE GROUP orders g")
        produce(node, context, sorted(bodies[index]))
    nodes[2].kill()
    return nodes, bodies


def test_routed_group_consumer_reads_the_live_nodes_while_a_dead_one_is_joined(
        start_node, context, tmp_path):
    """The table still counts the dead node up: its join went with the others' and
    is tried again, while the live nodes' deliveries flow; the dead node's come once it
    is back. Before, the join waited for the dead node's answer (3 s, and again every
    2 s while the table counted it up), holding the others' deliveries back: the live
    nodes' 200 took 9 s (1 s now: the first joins' grace)."""
    nodes, bodies = _one_node_just_killed(start_node, context, tmp_path)
    started = time.monotonic()
    got: set[bytes] = set()

    def received(wanted: set[bytes]) -> bool:
        messages = consumer.receive_many(100, 0.1)
        got.update(message.parts[0] for message in messages)
        consumer.ack_many(messages)
        return wanted <= got

    with RoutedGroupConsumer(nodes[0].monitor_dsn, "orders", "g", context=context) as consumer:
        live = bodies[0] | bodies[1]
        wait_until(lambda: received(live), 30, interval=0, message="the live nodes' messages")
        took = time.monotonic() - started
        assert took < LIVE_NODES_WITHIN_S, f"the live nodes' messages took {took:.1f} s"
        nodes[2].restart()
        wait_until(lambda: received(bodies[2]), 30, interval=0,
                   message="the dead node's messages once it is back")


def test_asyncio_routed_group_consumer_reads_the_live_nodes_while_a_dead_one_is_joined(
        start_node, context, aio_context, tmp_path):
    nodes, bodies = _one_node_just_killed(start_node, context, tmp_path)

    async def main() -> None:
        started = time.monotonic()
        got: set[bytes] = set()

        async def received(wanted: set[bytes]) -> None:
            deadline = time.monotonic() + 30
            while not wanted <= got:
                assert time.monotonic() < deadline, f"{len(wanted - got)} not received"
                messages = await consumer.receive_many(100, 0.1)
                got.update(message.parts[0] for message in messages)
                await consumer.ack_many(messages)

        async with aio.RoutedGroupConsumer(nodes[0].monitor_dsn, "orders", "g",
                                           context=aio_context) as consumer:
            await received(bodies[0] | bodies[1])
            took = time.monotonic() - started
            assert took < LIVE_NODES_WITHIN_S, f"the live nodes' messages took {took:.1f} s"
            await asyncio.to_thread(nodes[2].restart)
            await received(bodies[2])

    run(main(), 90)


def test_routed_group_consumer_returns_by_its_timeout_with_a_node_stopped(start_node, context,
                                                                         tmp_path):
    """A node stopped (SIGSTOP) under a routed consumer, its member's pipe full: receive
    and ack_many return by their timeouts (an ack waited for room for ever); once the
    node goes on, what waited goes and every delivery is ACKed."""
    # no takeover while it is stopped, no delivery again at an ack deadline
    nodes = start_group_cluster(start_node, ipc_endpoints(tmp_path, 2), *LONG_ACK_TIMEOUT,
                                "--timeout-nodes", "60000000")
    _every_consume_endpoint_known(nodes)
    for node in nodes:
        declare(node, "DECLARE TOPIC orders", "DECLARE GROUP orders g")
    produce(nodes[0], context, [b"%d" % n for n in range(50)])
    with RoutedGroupConsumer(nodes[1].monitor_dsn, "orders", "g", context=context) as consumer:
        got: list[Message] = []
        deadline = time.monotonic() + 15
        while len(got) < 50:
            assert time.monotonic() < deadline, f"{len(got)} of 50 delivered"
            got += consumer.receive_many(50, 1)
        member = consumer.consumers[nodes[0].consume_dsn]
        nodes[0].pause()
        try:
            deadline = time.monotonic() + 60
            while not member.unsent:  # WORKING until the stopped node's pipe is full
                assert time.monotonic() < deadline, "the socket still takes WORKING"
                member.working(*got)
            started = time.monotonic()
            consumer.ack_many(got)
            assert consumer.receive(1) is None
            assert time.monotonic() - started < 5
        finally:
            nodes[0].resume()
        deadline = time.monotonic() + 30
        while nodes[0].stats()["topics"]["orders"]["groups"]["g"]["acked"] < 50:
            assert time.monotonic() < deadline, "not every delivery ACKed"
            consumer.ack_many(consumer.receive_many(50, 0.5))  # (what came again, too)
