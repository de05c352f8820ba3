"""An operator's view and moves of a named group on real nodes in this process
(tests.support.inproc, on loopback ports of their own): pending deliveries (as
XPENDING) and seek (as XGROUP SETID) over the monitor socket, a group's own delivery
settings. With pzq-ctl and across a SIGKILL: test_group_ops_daemon.py."""

from __future__ import annotations

import time

import pytest

from pzq.client import GroupConsumer, request_monitor
from tests.integration.test_groups import FAST, drain, produce
from tests.support.inproc import AnyNode

pytestmark = pytest.mark.timeout(60)


def ask(node, command: str) -> str:
    return request_monitor(node.monitor_dsn, command, timeout=10).decode()


@pytest.fixture
def orders(start_inproc_node, context):
    return orders_of_g(start_inproc_node(*FAST, tcp=True), context)


def orders_of_g(node: AnyNode, context) -> AnyNode:
    """The node, its topic orders given the group g (from the earliest message), and
    --send-dsn reading it too (so what g ACKs stays stored, for a seek back)."""
    produce(node, context, [b"m%d" % n for n in range(10)])
    node.keep_default()
    assert ask(node, "DECLARE GROUP orders g").startswith("group g")
    return node


def test_seek_back_delivers_what_the_group_acked_while_it_is_stored(orders, context):
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        first = drain(g, 10)
        orders.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 10)
        # default (--send-dsn) holds them still, so they are stored
        assert ask(orders, "SEEK GROUP orders g to=earliest") == \
            "group g of topic orders at seq 0: 0 now done, 10 brought back, backlog 10\n"
        assert drain(g, 10) == first
        assert g.receive(0.3) is None


def test_a_seek_forward_names_the_backlog_left_to_deliver(orders, context):
    """A seek into a backlog not delivered yet brings nothing back, and the answer
    says what is still to go: it read '3 now done, 0 to be delivered' while the two
    messages past the target came next."""
    key = f"{orders.stats()['node_id']}-{8:016x}"
    assert ask(orders, f"SEEK GROUP orders g to={key}") == (
        "group g of topic orders at seq 8: 8 now done, 0 brought back, backlog 2\n")
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        assert drain(g, 2) == [b"m8", b"m9"]
        assert g.receive(0.3) is None


def test_seek_to_a_time_before_the_groups_start(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    produce(node, context, [b"old"])
    between = time.time_ns() // 1000
    produce(node, context, [b"a", b"b"])
    assert ask(node, "DECLARE GROUP orders late start=latest").startswith("group late")
    with GroupConsumer(node.consume_dsn, "orders", "late", context=context) as late:
        assert late.receive(0.3) is None
        assert "2 brought back, backlog 2" in ask(node, f"SEEK GROUP orders late to={between}")
        assert sorted(drain(late, 2)) == [b"a", b"b"]
        assert late.receive(0.3) is None


def group_figures(node, name: str) -> dict:
    return node.stats()["topics"]["orders"]["groups"][name]


def test_a_groups_own_ack_timeout_backoff_and_max_deliveries(start_inproc_node, context):
    """The node's --ack-timeout is 30 s; the group says 300 ms, waits 1 s before it
    delivers an expired message again, and gives it up after 2 deliveries."""
    node = start_inproc_node(*FAST, "--delivery-headers", tcp=True)
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


@pytest.mark.parametrize("command, error", [
    ("DECLARE GROUP orders g ack_timeout=0", "ack_timeout '0' must be above 0"),
    ("DECLARE GROUP orders g backoff=1s,soon", "soon is not a duration"),
    ("DECLARE GROUP orders g backoff=,", "backoff takes 1 to 32 durations"),
    # an empty step was dropped: 1s,,10s declared as 1s,10s, a step of the writer's lost
    ("DECLARE GROUP orders g backoff=1s,,10s", "backoff takes 1 to 32 durations"),
    ("DECLARE GROUP orders g backoff=1s,", "backoff takes 1 to 32 durations"),
    ("DECLARE GROUP orders g max_deliveries=-1", "max_deliveries=-1 is not a whole number"),
    ("DECLARE GROUP orders default ack_timeout=1s", "default's delivery settings are the "
                                                    "node's options"),
])
def test_bad_group_settings_get_one_clear_line(orders, command, error):
    answer = ask(orders, command)
    assert answer.startswith("ERROR: ") and error in answer, answer
    assert group_figures(orders, "g")["ack_timeout_us"] == 30_000_000  # unchanged


def test_a_seek_to_a_key_past_the_last_message_says_it_is_latest(orders, context):
    """It answered 'at seq 255' for a key of seq 255 with 10 stored: a seq no message
    had, while the group went on from the next new one, as latest."""
    key = f"{orders.stats()['node_id']}-{255:016x}"
    assert ask(orders, f"SEEK GROUP orders g to={key}") == (
        f"group g of topic orders at seq 10 (to={key} is past the last message stored: "
        "as latest): 10 now done, 0 brought back, backlog 0\n")
    produce(orders, context, [b"next"])  # seq 10, below the key's: delivered all the same
    with GroupConsumer(orders.consume_dsn, "orders", "g", context=context) as g:
        assert drain(g, 1) == [b"next"]
        assert g.receive(0.3) is None


def test_a_start_given_to_a_group_that_exists_is_said_not_to_apply(orders, context):
    """As XGROUP CREATE on an existing group (BUSYGROUP) or a JetStream consumer's
    deliver policy (not updatable), a declare cannot move a group: 'start=earliest'
    was answered 'exists already' alone, so a script that meant a rewind did not know
    none happened. The answer says so; a seek moves it."""
    assert ask(orders, "DECLARE GROUP orders late start=latest").startswith("group late")
    unmoved = " (start=earliest is not applied: a group's start is fixed when it is made; " \
              "SEEK GROUP moves it)"
    assert ask(orders, "DECLARE GROUP orders late start=earliest") == \
        f"group late of topic orders exists already{unmoved}\n"
    assert ask(orders, "DECLARE GROUP orders late start=earliest max_deliveries=4") == \
        f"group late of topic orders max_deliveries=4{unmoved}\n"
    assert ask(orders, "DECLARE GROUP orders late") == \
        "group late of topic orders exists already\n"
    with GroupConsumer(orders.consume_dsn, "orders", "late", context=context) as late:
        assert late.receive(0.3) is None  # still from latest
