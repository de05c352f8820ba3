"""An operator's view and moves of a named group with pzq-ctl, and a group's place and
settings across a SIGKILL, on real daemons (the monitor's verbs alone are tested in
process, in test_group_ops.py)."""

from __future__ import annotations

import pytest

from pzq.client import GroupConsumer
from tests.integration.test_group_ops import ask, group_figures, orders_of_g
from tests.integration.test_groups import FAST, drain, produce
from tests.integration.test_tools import one_line, tool
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def orders(start_node, context):
    return orders_of_g(start_node(*FAST, consume=True), context)


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
    # the group's counts, not those of the lines shown (it said 0 out, 1 waiting)
    assert head == "group g of topic orders: 0 out, 3 waiting"
    assert line.startswith(f"{taken[0].key.decode()} waiting consumer=- ")
    assert line.endswith(" deliveries=2")


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
