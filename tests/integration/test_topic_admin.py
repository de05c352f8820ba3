"""Administration of topics and groups over the monitor socket, on real nodes in this
process (tests.support.inproc, on loopback ports of their own), and with pzq-ctl, on
daemons."""

from __future__ import annotations

import pytest

from pzq.client import Consumer, GroupConsumer, Producer, request_monitor
from pzq.store import keyspace
from pzq.store.store import Store
from tests.integration.test_groups import FAST, drain, produce
from tests.integration.test_tools import one_line, tool


def ask(node, command: str) -> str:
    return request_monitor(node.monitor_dsn, command, timeout=10).decode()


def test_declare_query_remove_and_empty(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    assert ask(node, "TOPICS") == "no topics\n"
    assert ask(node, "DECLARE TOPIC orders max_messages=3").startswith("topic orders")
    assert ask(node, "DECLARE GROUP orders audit start=earliest") \
        .startswith("group audit of topic orders")
    assert ask(node, "TOPICS") == "orders messages=0 bytes=0 groups=audit " \
                                  "default=unclaimed max_messages=3\n" \
                                  "  group audit backlog=0 lag=0 inflight=0 ready=0 consumers=0\n"
    with Producer(node.receive_dsn, context=context) as producer:
        acks = [producer.produce([b"m%d" % n], topic="orders") for n in range(4)]
    assert [ack.ok for ack in acks] == [True, True, True, False]
    assert acks[3].status_message == b"QUEUE_FULL"
    # the declared group holds them from the start, before any consumer came
    assert "removed group default of topic orders: 0 messages" in ask(
        node, "REMOVE GROUP orders default")
    with GroupConsumer(node.consume_dsn, "orders", "audit", context=context) as audit:
        assert drain(audit, 3) == [b"m0", b"m1", b"m2"]
    node.wait_stats(lambda s: s["messages"] == 0)
    # a group nobody reads: EMPTY GROUP lets what it alone holds go
    produce(node, context, [b"x", b"y"])
    assert ask(node, "EMPTY GROUP orders audit") == \
        "emptied group audit of topic orders: 2 messages\n"
    node.wait_stats(lambda s: s["messages"] == 0)
    produce(node, context, [b"z"])
    assert ask(node, "EMPTY TOPIC orders") == "emptied topic orders: 1 message\n"
    assert ask(node, "REMOVE TOPIC orders") == "removed topic orders: 0 messages\n"
    assert ask(node, "TOPICS") == "no topics\n"


def test_topics_names_a_groups_own_delivery_settings(start_inproc_node):
    """A JetStream user's consumer info shows its ack wait, max deliver and backoff:
    TOPICS ends a group's line with the settings it was given (none: nothing), as
    DECLARE GROUP answered them."""
    node = start_inproc_node(*FAST, tcp=True)
    assert ask(node, "DECLARE TOPIC orders").startswith("topic orders")
    assert ask(node, "DECLARE GROUP orders plain").startswith("group plain")
    assert ask(node, "DECLARE GROUP orders jobs ack_timeout=5m max_deliveries=3 "
                     "backoff=10s,1m").endswith(
        " ack_timeout=300000000us max_deliveries=3 backoff=10000000us,60000000us\n")
    lines = ask(node, "TOPICS").splitlines()
    assert "  group plain backlog=0 lag=0 inflight=0 ready=0 consumers=0" in lines
    assert "  group jobs backlog=0 lag=0 inflight=0 ready=0 consumers=0 ack_timeout=300000000us" \
           " max_deliveries=3 backoff=10000000us,60000000us" in lines, lines


def test_removing_a_group_lets_go_what_only_it_held(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    produce(node, context, [b"first"])
    node.keep_default()
    ask(node, "DECLARE GROUP orders slow")
    produce(node, context, [b"second"])
    with Consumer(node.send_dsn, context=context) as plain:
        drain(plain, 2)
    node.wait_stats(lambda s: s["acked"] == 2)
    assert node.stats()["messages"] == 2  # "slow" holds both
    assert ask(node, "REMOVE GROUP orders slow") == \
        "removed group slow of topic orders: 2 messages deleted\n"
    node.wait_stats(lambda s: s["messages"] == 0)


def test_what_the_last_named_group_leaves_goes_to_send_dsn(start_inproc_node, context):
    """Nothing is stranded: a topic without named groups is --send-dsn's again."""
    node = start_inproc_node(*FAST, tcp=True)
    produce(node, context, [b"first"])
    ask(node, "DECLARE GROUP orders slow")
    produce(node, context, [b"second"])
    with Consumer(node.send_dsn, context=context) as plain:
        assert plain.receive(0.3) is None  # slow holds both: --send-dsn keeps no copy
        assert ask(node, "REMOVE GROUP orders slow") == \
            "removed group slow of topic orders: 0 messages deleted\n"
        assert sorted(drain(plain, 2)) == [b"first", b"second"]
    node.wait_stats(lambda s: s["messages"] == 0)
    assert ask(node, "TOPICS") == "orders messages=0 bytes=0 groups=default\n"


def test_unknown_names_get_clear_errors(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    produce(node, context, [b"x"])
    assert ask(node, "REMOVE TOPIC ordres") == "ERROR: no topic 'ordres' (topics: orders)"
    assert ask(node, "EMPTY GROUP orders nobody") == \
        "ERROR: no group 'nobody' in topic orders (groups: none)"
    assert ask(node, "DECLARE TOPIC bad/name").startswith("ERROR: topic 'bad/name' must be")
    assert ask(node, "DECLARE GROUP orders g start=yesterday").startswith(
        "ERROR: START:yesterday is not earliest")
    assert ask(node, "DECLARE THING x") == "ERROR: DECLARE TOPIC ... or DECLARE GROUP ..."
    assert ask(node, "DECLARE TOPIC orders colour=red") == "ERROR: unknown option 'colour'"
    with Consumer(node.send_dsn, context=context) as plain:
        assert drain(plain, 1) == [b"x"]


def test_a_refused_declare_makes_and_changes_nothing(start_inproc_node):
    node = start_inproc_node(*FAST, tcp=True)
    assert ask(node, "DECLARE TOPIC orders max_messages=5").startswith("topic orders")
    refused = {
        "DECLARE TOPIC zzbad1 dedup_window=forever": "forever",
        "DECLARE TOPIC zzbad1 max_messages=-1": "max_messages=-1 is not a whole number",
        "DECLARE TOPIC zzbad1 max_bytes=lots": "max_bytes=lots is not a whole number",
        "DECLARE TOPIC zzbad1 partitions=0": "partitions must be a whole number from 1",
        # not "a whole number 0 or more": 0 is refused as well
        "DECLARE TOPIC zzbad1 partitions=abc": "partitions=abc: partitions must be a whole "
                                               "number from 1 to 4096",
        # the last one not taken silently
        "DECLARE TOPIC zzbad1 partitions=2 partitions=3": "partitions given twice",
        "DECLARE TOPIC orders max_messages=7 max_messages=8": "max_messages given twice",
        "DECLARE TOPIC zzbad1 max_messages=3 colour=red": "unknown option 'colour'",
        "DECLARE TOPIC orders max_messages=7 dedup_window=forever": "forever",
        "DECLARE GROUP orders g colour=red": "unknown option 'colour'",
        "DECLARE GROUP orders g ack_timeout=1s max_deliveries=-1": "max_deliveries=-1",
        "DECLARE GROUP orders g start=yesterday": "START:yesterday",
        "DECLARE GROUP orders g ack_timeout=99999999999999999999999999999s":
            "ack_timeout '99999999999999999999' must be at most 36600d (a century)",
        "DECLARE TOPIC zzbad1 max_age=36601d": "max_age '36601d' must be at most 36600d",
    }
    for command, error in refused.items():
        answer = ask(node, command)
        assert answer.startswith("ERROR: ") and error in answer, (command, answer)
        assert ask(node, "TOPICS") == ("orders messages=0 bytes=0 groups=default "
                                       "max_messages=5\n"), command


# On a daemon: pzq-ctl runs as a user runs it.
def test_pzq_ctl_checks_its_values_and_names_the_option(start_node):
    node = start_node(*FAST, consume=True)
    refused = {
        ("group", "declare", "orders", "g", "--start", "bogus"):
            "group: error: argument --start: bogus is not earliest, latest or a time (ISO 8601",
        ("group", "seek", "orders", "g"): ": error: group seek needs --to WHERE: earliest",
        ("group", "seek", "orders", "g", "--to", "yesterday"):
            "group: error: argument --to: yesterday is not earliest, latest, a time (ISO",
        ("group", "pending", "orders", "g", "--limit", "-5"):
            "group: error: argument --limit: -5: give a whole number 0 or more",
        ("dead", "--limit", "-5"): "dead: error: argument --limit: -5: give a whole number",
        ("group", "declare", "orders", "g", "--backoff", "1s,soon"):
            "group: error: argument --backoff: soon is not a duration",
        ("group", "declare", "orders", "g", "--ack-timeout", "0"):
            "group: error: argument --ack-timeout: 0: give a duration above 0",
        ("group", "declare", "orders", "g", "--ack-timeout", "99999999999999d"):
            "group: error: argument --ack-timeout: 99999999999999d must be at most 36600d",
        ("topic", "declare", "zzbad1", "--dedup-window", "forever"):
            "topic: error: argument --dedup-window: forever is not a duration",
        ("topic", "declare", "zzbad1", "--max-messages", "-1"):
            "topic: error: argument --max-messages: -1: give a whole number 0 or more",
        ("topic", "declare", "zzbad1", "--partitions", "0"):
            "topic: error: argument --partitions: 0: give a whole number from 1 to",
        ("topic", "remove", "zzbad1", "--max-bytes", "5"):
            ": error: --max-bytes is for topic declare only, not topic remove",
        ("topic", "remove", "zzbad1", "--no-priorities"):  # (named --priorities)
            ": error: --no-priorities is for topic declare only, not topic remove",
        ("topic", "remove", "zzbad1", "--priorities"):
            ": error: --priorities is for topic declare only, not topic remove",
        ("purge", "nokey"): "purge: error: argument key: nokey is not a message key",
    }
    for args, error in refused.items():
        ran = tool("pzq-ctl", "--dsn", node.monitor_dsn, *args)
        assert ran.returncode == 2, (args, ran)
        assert one_line(ran.stderr).startswith(f"pzq-ctl {error}".replace(" :", ":")), \
            (args, ran.stderr)
    assert ask(node, "TOPICS") == "no topics\n"


# On a daemon: pzq-ctl runs as a user runs it.
def test_pzq_ctl_topics_and_groups(start_node, context):
    node = start_node(*FAST, consume=True)
    declared = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "orders",
                    "--max-messages", "10")
    assert declared.returncode == 0 and declared.stdout == "topic orders max_messages=10\n"
    group = tool("pzq-ctl", "--dsn", node.monitor_dsn, "group", "declare", "orders", "eu",
                 "--filter", "eu-*", "--start", "latest")
    assert group.returncode == 0, group.stderr
    listed = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topics")
    assert listed.stdout == "orders messages=0 bytes=0 groups=eu default=unclaimed " \
                            "max_messages=10\n" \
                            "  group eu backlog=0 lag=0 inflight=0 ready=0 consumers=0\n"
    missing = tool("pzq-ctl", "--dsn", node.monitor_dsn, "group", "remove", "orders", "us")
    assert missing.returncode == 1
    assert missing.stderr == "pzq-ctl: ERROR: no group 'us' in topic orders (groups: eu)\n"


@pytest.mark.parametrize("command", ["EMPTY GROUP orders g", "REMOVE GROUP orders g",
                                     "EMPTY TOPIC orders", "REMOVE TOPIC orders"])
def test_an_operators_command_takes_a_groups_delivery_counts_along(start_inproc_node,
                                                                   context, command):
    """Counts kept for messages delivered again go with what the command ends."""
    node = start_inproc_node(*FAST, tcp=True)
    produce(node, context, [b"a", b"b"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as g:
        taken = [g.receive(10) for _ in range(2)]
        g.nack_many(taken)
        assert [g.receive(10).parts[0] for _ in range(2)] == [b"a", b"b"]  # counted 2
        produce(node, context, [b"c"])  # a batch after the deliveries writes the counts
        assert counts_stored(node, stop=False) == 2
    assert not ask(node, command).startswith("ERROR")
    assert counts_stored(node, stop=True) == 0


def counts_stored(node, stop: bool) -> int:
    """Named groups' delivery counts in the node's store (read with the node stopped)."""
    assert node.stop() == 0
    store = Store.open(node.database)
    try:
        return sum(1 for _ in store.iterate(keyspace.GROUP_COUNT_PREFIX))
    finally:
        store.close()
        if not stop:
            node.restart()
