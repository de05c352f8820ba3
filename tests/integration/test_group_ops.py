"""An operator's view and moves of a named group on real nodes: pending deliveries
(as XPENDING) and seek (as XGROUP SETID), over the monitor socket and pzq-ctl."""

from __future__ import annotations

import time

import pytest

from pzq.client import GroupConsumer, request_monitor
from tests.integration.test_groups import FAST, drain, produce
from tests.integration.test_tools import one_line, tool
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(60)


def ask(node, command: str) -> str:
    return request_monitor(node.monitor_dsn, command, timeout=10).decode()


@pytest.fixture
def orders(start_node, context):
    """A node whose topic orders has the group g (from the earliest message), and
    --send-dsn reading it too (so what g ACKs stays stored, for a seek back)."""
    node = start_node(*FAST, consume=True)
    produce(node, context, [b"m%d" % n for n in range(10)])
    node.keep_default()
    assert ask(node, "DECLARE GROUP orders g").startswith("group g")
    return node


def test_pending_names_each_delivery_its_consumer_idle_time_and_count(orders, context):
    with GroupConsumer(orders.consume_dsn, "orders", "g", window=3, context=context) as g:
        taken = [g.receive(10) for _ in range(3)]
        taken[0].nack()
        again = g.receive(10)  # the nacked one, to the same consumer (it has credit)
        assert again.key == taken[0].key
        answer = ask(orders, "PENDING GROUP orders g")
        head, *lines = answer.splitlines()
        assert head == "group g of topic orders: 3 out, 0 waiting"
        assert [line.split()[0] for line in lines] == [m.key.decode() for m in taken]
        fields = [dict(item.split("=") for item in line.split()[2:]) for line in lines]
        assert len({row["consumer"] for row in fields}) == 1 and fields[0]["consumer"] != "-"
        assert [row["deliveries"] for row in fields] == ["2", "1", "1"]
        assert all(0 < int(row["deadline_in_ms"]) <= 30_000 for row in fields)
    # the consumer left: its deliveries went back, waiting for the next consumer
    wait_until(lambda: "0 out, 3 waiting" in ask(orders, "PENDING GROUP orders g"), 10,
               message="given back when the consumer left")
    shown = tool("pzq-ctl", "--dsn", orders.monitor_dsn, "group", "pending", "orders", "g",
                 "--limit", "1")
    assert shown.returncode == 0, shown.stderr
    head, line = shown.stdout.splitlines()
    assert head == "group g of topic orders: 0 out, 1 waiting"  # of the lines shown
    assert line.startswith(f"{taken[0].key.decode()} waiting consumer=- ")
    assert line.endswith(" deliveries=2")


def test_seek_back_delivers_what_the_group_acked_while_it_is_stored(orders, context):
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        first = drain(g, 10)
        orders.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 10)
        # default (--send-dsn) holds them still, so they are stored
        assert ask(orders, "SEEK GROUP orders g to=earliest") == \
            "group g of topic orders at seq 0: 0 now done, 10 to be delivered\n"
        assert drain(g, 10) == first
        assert g.receive(0.3) is None


def test_seek_forward_skips_and_a_restart_keeps_the_place(orders, context):
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        taken = [g.receive(10) for _ in range(10)]  # all out, none ACKed
    key_of_m6 = taken[6].key.decode()
    moved = tool("pzq-ctl", "--dsn", orders.monitor_dsn, "group", "seek", "orders", "g",
                 "--to", key_of_m6)
    assert moved.returncode == 0 and "6 now done" in moved.stdout, moved.stderr
    orders.kill()
    orders.restart()
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        assert sorted(drain(g, 4)) == [b"m6", b"m7", b"m8", b"m9"]
        assert g.receive(0.3) is None
    assert ask(orders, "SEEK GROUP orders g to=latest").startswith("group g")
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        assert g.receive(0.3) is None
        produce(orders, context, [b"new"])
        assert drain(g, 1) == [b"new"]


def test_seek_to_a_time_before_the_groups_start(start_node, context):
    node = start_node(*FAST, consume=True)
    produce(node, context, [b"old"])
    between = time.time_ns() // 1000
    produce(node, context, [b"a", b"b"])
    assert ask(node, "DECLARE GROUP orders late start=latest").startswith("group late")
    with GroupConsumer(node.consume_dsn, "orders", "late", context=context) as late:
        assert late.receive(0.3) is None
        assert "2 to be delivered" in ask(node, f"SEEK GROUP orders late to={between}")
        assert sorted(drain(late, 2)) == [b"a", b"b"]
        assert late.receive(0.3) is None


@pytest.mark.parametrize("command, error", [
    ("SEEK GROUP orders default to=earliest", "default is the consumers on --send-dsn"),
    ("SEEK GROUP orders nope to=earliest", "no group 'nope' in topic orders"),
    ("SEEK GROUP orders g", "SEEK needs to="),
    ("SEEK GROUP orders g to=yesterday", "to='yesterday' is not earliest, latest"),
    ("SEEK GROUP orders g to=00000000-0000000000000001", "another node's message"),
    ("SEEK TOPIC orders", "usage: SEEK GROUP topic group to=WHERE"),
    ("PENDING GROUP orders g limit=x", "limit=x is not a whole number"),
])
def test_bad_seeks_and_pending_requests_get_one_clear_line(orders, command, error):
    answer = ask(orders, command)
    assert answer.startswith("ERROR: ") and error in answer, answer
    assert "messages: 10" in ask(orders, "PENDING")  # the node's own PENDING still answers
    wrong = tool("pzq-ctl", "--dsn", orders.monitor_dsn, "group", "seek", "orders", "nope",
                 "--to", "earliest")
    assert wrong.returncode == 1 and "no group 'nope'" in one_line(wrong.stderr)


def group_figures(node, name: str) -> dict:
    return node.stats()["topics"]["orders"]["groups"][name]


def test_a_groups_own_ack_timeout_backoff_and_max_deliveries(start_node, context):
    """The node's --ack-timeout is 30 s; the group says 300 ms, waits 1 s before it
    delivers an expired message again, and gives it up after 2 deliveries."""
    node = start_node(*FAST, "--delivery-headers", consume=True)
    produce(node, context, [b"slow job"])
    answer = ask(node, "DECLARE GROUP orders jobs ack_timeout=300ms max_deliveries=2 "
                       "backoff=1s")
    assert answer == ("group jobs of topic orders start_seq=0 ack_timeout=300000us "
                      "max_deliveries=2 backoff=1000000us\n")
    figures = group_figures(node, "jobs")
    assert (figures["ack_timeout_us"], figures["max_deliveries"], figures["backoff_us"]) \
        == (300_000, 2, [1_000_000])
    with GroupConsumer(node.consume_dsn, "orders", "jobs", context=context) as jobs:
        first = jobs.receive(10)
        assert (first.deliveries, first.ack_timeout_us) == (1, 300_000)
        second = jobs.receive(10)  # not ACKed: again, once its deadline and wait passed
        assert second.deliveries == 2
        assert second.sent_us - first.sent_us >= 1_300_000
        assert jobs.receive(2.5) is None  # given up after the second delivery
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["jobs"]["dead_lettered"] == 1)


def test_a_groups_settings_change_and_survive_a_restart(orders):
    assert ask(orders, "DECLARE GROUP orders g ack_timeout=1h") == \
        "group g of topic orders ack_timeout=3600000000us\n"
    assert ask(orders, "DECLARE GROUP orders g") == "group g of topic orders exists already\n"
    orders.kill()
    orders.restart()
    figures = group_figures(orders, "g")
    assert (figures["ack_timeout_us"], figures["max_deliveries"], figures["backoff_us"]) \
        == (3_600_000_000, 0, [])
    shown = tool("pzq-ctl", "--dsn", orders.monitor_dsn, "group", "declare", "orders", "g",
                 "--backoff", "1s,1m", "--max-deliveries", "5")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().endswith("max_deliveries=5 backoff=1000000us,60000000us")


@pytest.mark.parametrize("command, error", [
    ("DECLARE GROUP orders g ack_timeout=0", "ack_timeout '0' must be above 0"),
    ("DECLARE GROUP orders g backoff=1s,soon", "soon is not a duration"),
    ("DECLARE GROUP orders g backoff=,", "backoff takes 1 to 32 durations"),
    ("DECLARE GROUP orders g max_deliveries=-1", "max_deliveries=-1 is not a whole number"),
    ("DECLARE GROUP orders default ack_timeout=1s", "default's delivery settings are the "
                                                    "node's options"),
])
def test_bad_group_settings_get_one_clear_line(orders, command, error):
    answer = ask(orders, command)
    assert answer.startswith("ERROR: ") and error in answer, answer
    assert group_figures(orders, "g")["ack_timeout_us"] == 30_000_000  # unchanged
