"""Partitioned topics on real daemons: a declared count reaches every node, every node
answers the same route table, a node refuses (MOVED, naming the owner) a message of a
partition it does not own, routing clients send each key to its owner and read every
node, and a dead owner's partitions move to a survivor with nothing ACKed lost."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import defaultdict

import pytest

from pzq.client import Producer, RoutedGroupConsumer, RoutedProducer, request_monitor
from pzq.errors import ExitCode
from pzq.protocol.headers import partition_of
from tests.cluster.test_groups_cluster import start_group_cluster
from tests.integration.test_tools import BIN, one_line, tool
from tests.support.harness import run_pzq, scrape_metrics, wait_until

PARTITIONS = 6


def routes(node) -> dict:
    return json.loads(request_monitor(node.monitor_dsn, "ROUTES", 10))


def ipc_cluster(tmp_path, count: int) -> list[str]:
    return [f"ipc://{tmp_path}/node{i}.cluster" for i in range(count)]


def declared_everywhere(nodes, topic: str = "orders") -> dict:
    """The route table once every node knows the topic's partitions and its peers'
    endpoints, and all answer the same owners."""
    def agreed() -> dict | None:
        tables = [routes(node) for node in nodes]
        if any(table["topics"].get(topic, {}).get("partitions") != PARTITIONS
               or any("receive" not in entry for entry in table["nodes"].values())
               for table in tables):
            return None
        owners = {tuple(table["topics"][topic]["owners"]) for table in tables}
        return tables[0] if len(owners) == 1 else None
    return wait_until(agreed, 20, interval=0.1, message="one route table on every node")


def node_by_cluster_endpoint(nodes, endpoints: list[str]) -> dict:
    return dict(zip(endpoints, nodes, strict=True))


def keyed_messages(count: int, keys: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % (i % keys), b"m%d" % i) for i in range(count)]


def drain_routed(consumer: RoutedGroupConsumer, count: int, timeout: float = 60) -> list:
    """``count`` messages of distinct first parts, each ACKed, within ``timeout`` s."""
    got: dict[bytes, object] = {}

    def enough() -> bool:
        messages = consumer.receive_many(100, 0.1)
        for message in messages:
            got.setdefault(message.parts[0], message)
        consumer.ack_many(messages)
        return len(got) >= count
    wait_until(enough, timeout, interval=0, message=f"{count} messages from every node")
    return list(got.values())


def test_a_declared_count_reaches_every_node_and_each_key_has_one_owner(
        start_node, context, tmp_path):
    endpoints = ipc_cluster(tmp_path, 3)
    nodes = start_group_cluster(start_node, endpoints)
    answer = nodes[0].ask(f"DECLARE TOPIC orders partitions={PARTITIONS}")
    assert f"partitions={PARTITIONS}" in answer, answer
    table = declared_everywhere(nodes)
    by_endpoint = node_by_cluster_endpoint(nodes, endpoints)
    assert set(table["nodes"]) == set(endpoints)
    for endpoint, entry in table["nodes"].items():
        assert entry["receive"] == by_endpoint[endpoint].receive_dsn
        assert entry["consume"] == by_endpoint[endpoint].consume_dsn
    # every node owns what the table says: STATS agrees partition by partition
    owners = table["topics"]["orders"]["owners"]
    for endpoint, node in by_endpoint.items():
        owned = node.stats()["topics"]["orders"]["partitions_owned"]
        assert owned == [p for p, owner in enumerate(owners) if owner == endpoint]

    # a plain producer on node 0: keys it owns are stored, the others MOVED to the owner
    # (node 0 may own none: the placement hashes the endpoints, which name tmp_path)
    keys = [b"k%d" % i for i in range(30)]
    moved: dict[str, list[bytes]] = defaultdict(list)  # owner -> its keys node 0 refused
    with Producer(nodes[0].receive_dsn, context=context, batch=1) as producer:
        for key in keys:
            ack = producer.produce([b"x"], headers=[b"KEY:" + key], topic="orders")
            partition = partition_of(key, PARTITIONS)
            owner = owners[partition]
            if owner == endpoints[0]:
                assert ack.ok, ack
            else:
                assert not ack.ok
                assert ack.status_message.decode() == (
                    f"MOVED orders {partition} {by_endpoint[owner].receive_dsn}")
                moved[owner].append(key)
    assert nodes[0].stats()["moved"] == sum(map(len, moved.values()))
    for owner, owned_keys in moved.items():  # sent again where the MOVED said
        with Producer(by_endpoint[owner].receive_dsn, context=context, batch=1) as producer:
            for key in owned_keys:
                assert producer.produce([b"x"], headers=[b"KEY:" + key], topic="orders").ok
    # pzq-monitor over the three nodes: each node's row, and the topic summed over them
    stored = sum(node.stats()["topics"]["orders"]["messages"] for node in nodes)
    assert stored == len(keys)
    shown = tool("pzq-monitor", *(arg for node in nodes for arg in ("--dsn", node.monitor_dsn)),
                 columns=400)
    summed = [line for line in shown.stdout.splitlines() if "all 3" in line]
    assert len(summed) == 1 and "orders" in summed[0] and f" {stored} " in summed[0], shown


def test_routing_clients_keep_each_keys_order_and_lose_nothing_when_an_owner_dies(
        start_node, context, tmp_path):
    endpoints = ipc_cluster(tmp_path, 3)
    nodes = start_group_cluster(start_node, endpoints)
    nodes[1].ask(f"DECLARE TOPIC orders partitions={PARTITIONS}")
    table = declared_everywhere(nodes)
    consumer = RoutedGroupConsumer(nodes[2].monitor_dsn, "orders", "billing",
                                   context=context)
    with RoutedProducer(nodes[0].monitor_dsn, "orders", context=context) as producer:
        first = keyed_messages(300, 12)
        for key, body in first:
            producer.send([body], key=key)
        assert all(ack.ok and not ack.status_message for ack in producer.flush())
        assert producer.moved == 0  # the table was right: nothing sent twice
    got = drain_routed(consumer, len(first))
    order: dict[bytes, list[int]] = defaultdict(list)
    for message in got:  # arrival order per key is the producer's order
        body = message.parts[0]
        order[b"k%d" % (int(body[1:]) % 12)].append(int(body[1:]))
    assert all(seqs == sorted(seqs) for seqs in order.values()), order

    # the owner of most partitions dies: the survivors take its partitions (and its
    # messages' copies); a routing producer follows and nothing ACKed is lost
    owners = table["topics"]["orders"]["owners"]
    victim = max(endpoints, key=owners.count)
    by_endpoint = node_by_cluster_endpoint(nodes, endpoints)
    survivors = [node for endpoint, node in by_endpoint.items() if endpoint != victim]
    with RoutedProducer([node.monitor_dsn for node in survivors], "orders",
                        context=context) as producer:
        unread = keyed_messages(60, 12)
        for key, body in unread:
            producer.send([b"before-" + body], key=key)
        assert all(ack.ok for ack in producer.flush())
        by_endpoint[victim].kill()

        def moved() -> bool:
            table = routes(survivors[0])
            return victim not in table["topics"]["orders"]["owners"]
        wait_until(moved, 20, interval=0.1, message="the dead owner's partitions moved")
        for key, body in unread:
            producer.send([b"after-" + body], key=key)
        acks = producer.flush()
        assert all(ack.ok for ack in acks), [a for a in acks if not a.ok]
    wanted = {b"before-" + body for _, body in unread} | {b"after-" + body
                                                          for _, body in unread}
    got = drain_routed(consumer, len(wanted))
    assert wanted <= {message.parts[0] for message in got}
    consumer.close()


def test_bad_partition_declarations_are_refused_and_the_node_keeps_running(start_node):
    node = start_node()
    for bad in ("partitions=0", "partitions=abc", "partitions=5000"):
        answer = node.ask(f"DECLARE TOPIC orders {bad}")
        assert answer.startswith("ERROR"), answer
    assert "partitions=4" in node.ask("DECLARE TOPIC orders partitions=4")
    answer = node.ask("DECLARE TOPIC orders partitions=8")
    assert answer.startswith("ERROR") and "fixed once declared" in answer, answer
    # a lone node owns every partition of its topics
    table = routes(node)
    assert table["topics"]["orders"]["owners"] == [table["node"]] * 4
    figures = node.stats()["topics"]["orders"]
    assert figures["partitions"] == 4 and figures["partitions_owned"] == [0, 1, 2, 3]
    assert node.ask("TOPICS").splitlines()[0].startswith("orders messages=0 bytes=0")
    assert "partitions=4" in node.ask("TOPICS").splitlines()[0]
    shown = tool("pzq-monitor", "--dsn", node.monitor_dsn, columns=400)
    assert shown.returncode == 0 and "orders p0,1,2,3/4" in shown.stdout, shown
    metrics = scrape_metrics(node.monitor_dsn)
    labels = f'monitor="{node.monitor_dsn}",node="{node.stats()["node_id"]}",topic="orders"'
    assert f"pzq_topic_partitions{{{labels}}} 4.0" in metrics
    assert f"pzq_topic_partitions_owned{{{labels}}} 4.0" in metrics


def test_the_tools_declare_show_produce_and_consume_a_partitioned_topic(start_node, tmp_path):
    endpoints = ipc_cluster(tmp_path, 2)
    nodes = start_group_cluster(start_node, endpoints)
    declared = tool("pzq-ctl", "--dsn", nodes[0].monitor_dsn, "topic", "declare", "orders",
                    "--partitions", "4")
    assert declared.returncode == 0 and "partitions=4" in declared.stdout, declared
    wait_until(lambda: all(routes(node)["topics"].get("orders") for node in nodes), 20,
               interval=0.1, message="the count on both nodes")
    shown = tool("pzq-ctl", "--dsn", nodes[1].monitor_dsn, "routes")
    assert shown.returncode == 0, shown
    assert "topic orders: 4 partitions" in shown.stdout
    assert shown.stdout.count("  partition ") == 4
    assert all(endpoint in shown.stdout for endpoint in endpoints)

    lines = "".join(f"k{i % 5}\tm{i}\n" for i in range(40))
    sent = tool("pzq-produce", "--routes", nodes[1].monitor_dsn, "--topic", "orders",
                "--key-from-line", stdin=lines)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count(" ok") == 40 and "failed" not in sent.stdout, sent.stdout
    read = tool("pzq-consume", "--routes", nodes[0].monitor_dsn, "--topic", "orders",
                "--group", "billing", "--count", "40", "--timeout", "30")
    assert read.returncode == 0, read.stderr
    assert sorted(line.split(" ", 1)[1] for line in read.stdout.splitlines()) == sorted(
        f"m{i}" for i in range(40))
    assert sum(node.stats()["stored"] for node in nodes) == 40  # once, on its owner


@pytest.mark.parametrize(("name", "args", "message"), [
    ("pzq-produce", ("--routes", "tcp://127.0.0.1:9"), "--routes needs --topic"),
    ("pzq-produce", ("--key", "a", "--key-from-line"), "--key and --key-from-line"),
    ("pzq-consume", ("--routes", "tcp://127.0.0.1:9"), "need --topic and --group"),
    ("pzq-consume", ("--routes", "tcp://127.0.0.1:9", "--dsn", "tcp://127.0.0.1:9",
                     "--topic", "t", "--group", "g"), "instead of --dsn"),
    ("pzq-produce", ("--routes", "tcp://127.0.0.1:9", "--dsn", "tcp://127.0.0.1:9",
                     "--topic", "t"), "instead of --dsn"),
])
def test_routing_options_used_wrongly_are_one_line(name, args, message):
    done = tool(name, *args)
    assert done.returncode == ExitCode.USAGE
    assert message in one_line(done.stderr)


@pytest.mark.parametrize("name, args", [("pzq-produce", ()),
                                         ("pzq-consume", ("--group", "billing"))])
def test_a_routing_tool_with_no_node_to_ask_says_so(tmp_path, name, args):
    """A second into each monitor's wait the tool says what it waits for (it waited
    5 s a monitor in silence), then exits 1 with one line naming each monitor."""
    nobody = f"ipc://{tmp_path}/nobody"
    done = tool(name, "--routes", nobody, "--routes", f"{nobody}-too", "--topic", "orders",
                *args, stdin="x\n", timeout=60)
    assert done.returncode == ExitCode.FAILURE
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"{name}: no answer yet from {nobody}: nothing answers there (is the node "
        f"running?); waiting up to 5 s",
        f"{name}: no answer yet from {nobody}-too: nothing answers there (is the node "
        f"running?); waiting up to 5 s",
        f"{name}: error: no node answered ROUTES: no answer from {nobody} within 5 s: "
        f"nothing answers there (is the node running?); no answer from {nobody}-too "
        f"within 5 s: nothing answers there (is the node running?)"]


def test_partitions_declared_at_start_are_kept_and_a_change_is_refused(start_node, tmp_path):
    node = start_node("--partitions", "orders=4, payments=2")
    figures = node.stats()["topics"]
    assert figures["orders"]["partitions"] == 4 and figures["payments"]["partitions"] == 2
    node.stop()
    node.start()  # the same count again: nothing to say
    assert node.stats()["topics"]["orders"]["partitions"] == 4
    node.stop()
    done = run_pzq(["--database", str(node.database), "--partitions", "orders=8"])
    assert done.returncode == ExitCode.USAGE
    assert "orders has 4 partitions; a partition count is fixed" in one_line(done.stderr)


@pytest.mark.parametrize("bad", ["orders", "orders=0", "orders=x", "../x=2", "orders=5000"])
def test_a_bad_partitions_option_is_one_line(bad):
    done = run_pzq(["--partitions", bad])
    assert done.returncode == ExitCode.USAGE
    assert "--partitions" in one_line(done.stderr)


def test_a_topic_named_twice_in_partitions_is_refused_and_nothing_kept(tmp_path):
    """Not the last count silently: a topic's count is fixed once declared."""
    any_port = "tcp://127.0.0.1:*"
    done = run_pzq(["--database", str(tmp_path / "db"), "--receive-dsn", any_port,
                    "--send-dsn", any_port, "--monitor-dsn", any_port,
                    "--partitions", "orders=4,payments=2,orders=8"], timeout=15)
    assert done.returncode == ExitCode.USAGE
    assert one_line(done.stderr) == ("pzq: error: --partitions names the topic orders twice "
                                     "(orders=4, orders=8): give it one count")
    assert not (tmp_path / "db").exists()


def test_a_routed_send_that_times_out_is_not_sent_later(start_node, context):
    """The caller got TimeoutError and may send again: the producer must not also send
    it itself later (after newer messages of its key, or twice)."""
    node = start_node("--partitions", "orders=2")
    with RoutedProducer(node.monitor_dsn, "orders", window=1, batch=1,
                        context=context) as producer:
        first = producer.send([b"first"], key=b"k")
        node.pause()
        try:
            with pytest.raises(TimeoutError):
                producer.send([b"second"], key=b"k", timeout=0.5)
            assert producer.outstanding == 1  # only the first, sent and unanswered
        finally:
            node.resume()
        acks = producer.flush(10)
    assert [ack.msg_id for ack in acks] == [first] and acks[0].ok
    assert node.stats()["stored"] == 1


def test_a_routed_send_waits_for_an_owner_whose_endpoints_are_not_known_yet(
        start_node, context, tmp_path):
    """Right after a cluster starts, the table names owners whose ROUTING (their
    endpoints) has not reached the node asked: a send to such an owner's partition
    waits for the table to know it, rather than failing at once."""
    first, second = ipc_cluster(tmp_path, 2)
    partitions = ("--partitions", "orders=16")
    node = start_node("--broadcast-dsn", first, "--nodes", second, *partitions)
    with RoutedProducer(node.monitor_dsn, "orders", context=context) as producer:
        owners = producer.table.topics["orders"]["owners"]
        assert producer.table.endpoint(second, "receive") is None  # not heard from yet
        key = next(b"k%d" % n for n in range(1000)
                   if owners[partition_of(b"k%d" % n, 16)] == second)
        other = start_node("--broadcast-dsn", second, "--nodes", first, *partitions)
        producer.send([b"to the second node"], key=key, timeout=20)
        acks = producer.flush(20)
    assert [ack.ok for ack in acks] == [True]
    assert other.stats()["stored"] == 1


def test_pzq_produce_with_owners_down_shows_what_was_acked_and_names_the_owners(
        start_node, tmp_path):
    """Two nodes of three SIGKILLed: the survivor hears no majority, so their partitions
    stay theirs and what goes to them has no ACK. pzq-produce --routes shows the ACKs
    the survivor gave (it lost the ACKs that came while it waited in slices) and names
    the dead owners' endpoints and what a probe finds there (it named the monitor asked
    for the table, blaming "a busy node, not a pzq endpoint, or CURVE")."""
    endpoints = ipc_cluster(tmp_path, 3)
    nodes = start_group_cluster(start_node, endpoints)
    nodes[0].ask(f"DECLARE TOPIC orders partitions={PARTITIONS}")
    owners = declared_everywhere(nodes)["topics"]["orders"]["owners"]
    by_endpoint = node_by_cluster_endpoint(nodes, endpoints)
    survivor = by_endpoint[owners[0]]
    dead = [node for node in nodes if node is not survivor]
    for node in dead:
        node.kill()
    keys = [b"k%d" % i for i in range(24)]
    kept = [key for key in keys if owners[partition_of(key, PARTITIONS)] == owners[0]]
    lost_at = {node.receive_dsn: sum(by_endpoint[owners[partition_of(key, PARTITIONS)]]
                                     is node for key in keys) for node in dead}
    sent = tool("pzq-produce", "--routes", survivor.monitor_dsn, "--topic", "orders",
                "--key-from-line", "--timeout", "8",
                stdin="".join(f"{key.decode()}\tm\n" for key in keys), timeout=60)
    assert sent.returncode == ExitCode.FAILURE, sent
    assert sent.stdout.count(" ok") == len(kept), sent  # REPLICATION_FAILED: no peer up
    error = sent.stderr.strip().splitlines()[-1]
    assert "Traceback" not in sent.stderr and survivor.monitor_dsn not in error, error
    assert error.startswith(f"pzq-produce: error: no ACK within 8 s for "
                            f"{len(keys) - len(kept)} messages from their partitions' owners: ")
    for endpoint, count in lost_at.items():
        if count:
            assert f"{endpoint} ({count} message{'s' if count > 1 else ''}): nothing " \
                   f"answers there" in error, error

    # Ctrl-C while it waits: the survivor's ACKs are shown too (lost with the flush)
    acks_before = survivor.stats()["producer_acks_sent"]
    with subprocess.Popen([str(BIN / "pzq-produce"), "--routes", survivor.monitor_dsn,
                           "--topic", "orders", "--key-from-line"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as interrupted:
        assert interrupted.stdin is not None
        interrupted.stdin.write("".join(f"{key.decode()}\tm\n" for key in keys))
        interrupted.stdin.close()
        wait_until(lambda: survivor.stats()["producer_acks_sent"] - acks_before >= len(kept),
                   30, interval=0.1, message="the survivor's ACKs sent")
        interrupted.send_signal(signal.SIGINT)
        interrupted.wait(30)
        assert interrupted.stdout is not None and interrupted.stderr is not None
        out, err = interrupted.stdout.read(), interrupted.stderr.read()
    assert interrupted.returncode == ExitCode.INTERRUPTED, err
    assert out.count(" ok") == len(kept), (out, err)
    assert err.strip().splitlines()[-1] == (
        f"pzq-produce: interrupted with {len(keys) - len(kept)} messages sent and not ACKed "
        f"yet: the node may have stored them")
