"""Time in messages on real nodes: the time headers refused when malformed, in both
produce protocols, with nothing stored; delayed and scheduled delivery (DELAY:,
NOT-BEFORE:) to ``default`` and to named groups, in due-time order, held across a
restart and a SIGKILL (a daemon's)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pzq import aio
from pzq.archive.format.files import read_topic
from pzq.client import Consumer, GroupConsumer, Producer, RoutedProducer, request_monitor
from pzq.delivery.ages import WALK_AT_MOST
from pzq.store import keyspace
from pzq.store.scheduled import ScheduledArea
from pzq.store.scheduled_copies import ScheduledCopies
from pzq.store.store import Store
from tests.integration.test_groups import FAST
from tests.support.harness import scrape_metrics

pytestmark = pytest.mark.timeout(60)
# A scheduled message asserted to be waiting is due this far ahead: a loaded machine
# takes that long for no step between its produce and the assertion.
DUE_AFTER_S = 3
DUE_AFTER_US = DUE_AFTER_S * 1_000_000
BIN = Path(sys.executable).parent


def tool(name: str, *args: str, input: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / name), *args], capture_output=True, check=False,
                          text=True, timeout=40, input=input)


def now_us() -> int:
    return time.time_ns() // 1000


def let_time_pass(seconds: float) -> None:
    """A wait for the wall clock itself (a message's age), not for the node: nothing
    the node does can end it sooner."""
    time.sleep(seconds)


# -- the headers refused ----------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 20], ids=["original frames", "produce batches"])
def test_a_bad_time_header_is_refused_naming_it_and_nothing_is_stored(start_inproc_node,
                                                                      context, batch):
    node = start_inproc_node(consume=False, tcp=True)
    bad = [[b"DELAY:soon"], [b"PRIORITY:10"], [b"TTL:5", b"EXPIRES:5"], [b"NOT-BEFORE:-1"]]
    with Producer(node.receive_dsn, window=40, batch=batch, context=context) as producer:
        assert producer.produce([b"first"], topic="orders").ok  # asks for batches
        sent = [producer.send([b"bad"], headers, topic="orders") for headers in bad]
        good = producer.send([b"good"], topic="orders", priority=3, ttl=60)
        acks = {ack.msg_id: ack for ack in producer.flush(10)}
    assert [(acks[msg_id].ok, acks[msg_id].status_message) for msg_id in sent] == [
        (False, b"DELAY:soon is not a whole number of milliseconds"),
        (False, b"PRIORITY:10 is out of range: give 0 to 9 (a priority)"),
        (False, b"TTL and EXPIRES both given: give one"),
        (False, b"NOT-BEFORE:-1 is not a whole number of \xc2\xb5s since the epoch")]
    assert acks[good].ok
    stats = node.stats()
    assert (stats["messages"], stats["scheduled"], stats["rejected"]) == (2, 0, 4)


# -- delayed and scheduled delivery -------------------------------------------------------

def test_a_delayed_message_is_delivered_at_its_time_and_not_before(start_inproc_node,
                                                                   context):
    node = start_inproc_node(consume=False, tcp=True)
    before = now_us()
    with Producer(node.receive_dsn, context=context) as producer:
        # long enough that a loaded machine still sees it waiting (asserted below)
        assert producer.produce([b"later"], topic="orders", delay=DUE_AFTER_S).ok
        assert producer.produce([b"at once"], topic="orders", delay=0).ok
    stats = node.stats()
    assert (stats["messages"], stats["scheduled"]) == (1, 1)
    orders = stats["topics"]["orders"]
    assert orders["scheduled"] == 1
    assert before + DUE_AFTER_US <= orders["next_due_us"] <= now_us() + DUE_AFTER_US
    topics = request_monitor(node.monitor_dsn, "TOPICS", 10).decode()
    assert re.search(r"^orders messages=1 .* scheduled=1 next_due=20\d\d-\S+\+00:00 ",
                     topics, re.MULTILINE), topics
    metrics = scrape_metrics(node.monitor_dsn)
    assert re.search(r'pzq_topic_scheduled\{[^}]*topic="orders"\} 1\.0', metrics)
    due_s = re.search(r'pzq_topic_next_due_timestamp_seconds\{[^}]*topic="orders"\} (\S+)',
                      metrics)
    assert due_s is not None
    assert float(due_s.group(1)) == pytest.approx(orders["next_due_us"] / 1e6, abs=1e-3)
    with Consumer(node.send_dsn, context=context) as consumer:
        first = consumer.receive(5)
        assert first is not None and first.parts[0] == b"at once"
        first.ack()
        later = consumer.receive(10)
        assert later is not None and later.parts[0] == b"later"
        assert later.sent_us >= before + DUE_AFTER_US  # its delivery, not before its time
        later.ack()
    node.wait_stats(lambda s: s["messages"] == 0 and s["scheduled"] == 0
                    and s["topics"]["orders"]["next_due_us"] == 0)


def test_due_messages_go_in_due_time_order_then_arrival_order(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    due = now_us() + DUE_AFTER_US
    with Producer(node.receive_dsn, window=10, context=context) as producer:
        for body, at, topic in [(b"c", due + 2, "b"), (b"a1", due, "a"), (b"b", due + 1, "a"),
                                (b"a2", due, "b"), (b"a3", due, "a")]:
            producer.send([body], topic=topic, not_before=at)
        assert all(ack.ok for ack in producer.flush(10))
    assert node.stats()["scheduled"] == 5
    with Consumer(node.send_dsn, context=context) as consumer:
        got = []
        for _ in range(5):
            message = consumer.receive(10)
            assert message is not None
            got.append(message.parts[0])
            message.ack()
    assert got == [b"a1", b"a2", b"a3", b"b", b"c"]


def test_a_named_group_gets_a_scheduled_message_at_its_time(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    assert request_monitor(node.monitor_dsn, "DECLARE TOPIC orders", 10) == b"topic orders\n"
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as group:
        before = now_us()
        with Producer(node.receive_dsn, context=context) as producer:
            assert producer.produce([b"later"], topic="orders", delay=1).ok
            assert producer.produce([b"now"], topic="orders").ok
        first = group.receive(5)
        assert first is not None and first.parts[0] == b"now"
        group.ack(first)
        later = group.receive(10)
        assert later is not None and later.parts[0] == b"later"
        assert now_us() >= before + 1_000_000
        group.ack(later)
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["backlog"] == 0)


def test_a_message_not_before_a_past_time_is_delivered_at_once(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"late already"], not_before=now_us() - 10_000_000).ok
    assert (node.stats()["messages"], node.stats()["scheduled"]) == (1, 0)


def test_scheduled_messages_are_kept_across_a_restart(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"next year"], topic="orders", delay=365 * 86400).ok
        assert producer.produce([b"soon"], topic="orders", delay=DUE_AFTER_S).ok
    node.restart()
    stats = node.stats()
    assert (stats["scheduled"], stats["topics"]["orders"]["scheduled"]) == (2, 2)
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None and message.parts[0] == b"soon"
        message.ack()
        assert consumer.receive(0.5) is None
    node.wait_stats(lambda s: s["scheduled"] == 1 and s["messages"] == 0)


# On a daemon: the point is the SIGKILL.
def test_an_acked_scheduled_message_is_delivered_after_a_sigkill_not_before_its_time(
        start_node, context):
    node = start_node()
    before = now_us()
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"scheduled"], topic="orders", delay=3).ok
    node.kill()
    node.restart()
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(15)
        assert message is not None and message.parts[0] == b"scheduled"
        assert message.sent_us >= before + 3_000_000
        message.ack()
    node.wait_figures(lambda f: f["messages"] == 0)


def test_the_area_keeps_its_counts_and_order_in_the_store(tmp_path):
    """A topic's count moves with the batch that adds or releases; the next due time
    is the first key's, and nothing is due before it."""
    store = Store.open(tmp_path / "db")
    area = ScheduledArea(store)
    store.register(area)
    batch = store.begin()
    for due, topic in [(300, "a"), (100, "b"), (200, "a")]:
        area.add(batch, topic, due, batch.take_seq(), b"record %d" % due)
    store.commit(batch)
    assert (area.counts, area.next_due_us(), area.next_due_us("a")) == ({"a": 2, "b": 1},
                                                                        100, 200)
    assert area.due(99, 10) == []
    due = area.due(250, 10)
    assert [(message.topic, message.due_us) for message in due] == [("b", 100), ("a", 200)]
    batch = store.begin()
    for message in due:
        area.released(batch, message)
    store.commit(batch)
    assert (area.counts, area.next_due_us()) == ({"a": 1}, 300)
    store.close()
    store = Store.open(tmp_path / "db")
    again = ScheduledArea(store)
    assert (again.counts, again.next_due_us()) == ({"a": 1}, 300)
    assert len(list(store.iterate(keyspace.SCHEDULED_PREFIX))) == 1
    store.close()


def test_scheduled_copies_are_indexed_by_due_time_and_found_by_seq_across_a_reopen(
        tmp_path):
    """A holder's copies: read by due time up to now, dropped by seq (a remove names
    the seq alone), counted per origin, and all of it as it was after a restart."""
    store = Store.open(tmp_path / "db")
    copies = ScheduledCopies(store, lambda origin, seq: seq == 9)
    store.register(copies)
    batch = store.begin()
    for origin, seq, due in [(b"aaaaaaaa", 1, 300), (b"aaaaaaaa", 2, 100),
                             (b"aaaaaaaa", 3, 200), (b"bbbbbbbb", 1, 50)]:
        assert copies.add(batch, origin, seq, due, (b"cccccccc",), b"record %d" % seq)
    assert not copies.add(batch, b"aaaaaaaa", 9, 10, (), b"removed before it came")
    store.commit(batch)
    assert [(c.seq, c.due_us, c.holders) for c in copies.due(b"aaaaaaaa", 250, 10)] == [
        (2, 100, (b"cccccccc",)), (3, 200, (b"cccccccc",))]
    batch = store.begin()
    assert copies.remove(batch, b"aaaaaaaa", 2) and not copies.remove(batch, b"aaaaaaaa", 7)
    store.commit(batch)
    store.close()
    store = Store.open(tmp_path / "db")
    again = ScheduledCopies(store, lambda origin, seq: False)
    assert dict(again.counts) == {b"aaaaaaaa": 2, b"bbbbbbbb": 1} and again.held == 3
    assert again.next_due_us(b"aaaaaaaa") == 200
    first = again.due(b"aaaaaaaa", 1000, 10)
    assert [(c.seq, c.value) for c in first] == [(3, b"record 3"), (1, b"record 1")]
    assert again.next_due_us(b"aaaaaaaa", first[0].key) == 300  # past a passed-over one
    store.close()


# -- expiry -------------------------------------------------------------------------------

def dead_lines(node) -> list[str]:
    return request_monitor(node.monitor_dsn, "DEAD", 10).decode().splitlines()[1:]


def test_an_expired_message_is_never_delivered_and_goes_to_the_dead_letters(
        start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"stale soon"], topic="orders", ttl=0.3).ok
        assert producer.produce([b"fresh"], topic="orders", ttl=3600).ok
    node.wait_stats(lambda s: s["ttl_expired"] == 1 and s["dead_letters"] == 1, 10)
    stats = node.stats()
    assert (stats["messages"], stats["topics"]["orders"]["ttl_expired"]) == (1, 1)
    assert stats["expired"] == 0  # ack timeouts keep their own count
    [line] = dead_lines(node)
    assert line.endswith(" deliveries=0 bytes=10 reason=expired"), line
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(5)
        assert message is not None and message.parts[0] == b"fresh"
        message.ack()
        assert consumer.receive(0.3) is None
    metrics = scrape_metrics(node.monitor_dsn)
    assert re.search(r"pzq_ttl_expired_total\{[^}]*\} 1\.0", metrics)
    assert re.search(r'pzq_topic_ttl_expired_total\{[^}]*topic="orders"\} 1\.0', metrics)


def test_a_topic_that_drops_expired_messages_keeps_no_dead_letter(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    answer = request_monitor(node.monitor_dsn, "DECLARE TOPIC orders on_expire=drop", 10)
    assert answer == b"topic orders on_expire=drop\n"
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"stale soon"], topic="orders", expires=now_us() + 300_000).ok
    node.wait_stats(lambda s: s["ttl_expired"] == 1 and s["messages"] == 0, 10)
    assert node.stats()["dead_letters"] == 0


def test_every_group_lets_an_expired_message_go_and_it_is_counted_once(start_inproc_node,
                                                                        context):
    node = start_inproc_node(*FAST, tcp=True)
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders billing",
                    "DECLARE GROUP orders audit"):
        assert not request_monitor(node.monitor_dsn, command, 10).startswith(b"ERROR")
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"stale soon"], topic="orders", ttl=0.3).ok
        assert producer.produce([b"fresh"], topic="orders").ok
    node.wait_stats(lambda s: s["ttl_expired"] == 1 and s["dead_letters"] == 1, 10)
    for name in ("billing", "audit"):
        with GroupConsumer(node.consume_dsn, "orders", name, context=context) as group:
            message = group.receive(5)
            assert message is not None and message.parts[0] == b"fresh"
            group.ack(message)
            assert group.receive(0.3) is None
    node.wait_stats(lambda s: s["messages"] == 0)


def test_a_delivery_out_at_expiry_is_not_taken_back_and_its_ack_counts(start_inproc_node,
                                                                        context):
    node = start_inproc_node("--ack-timeout", "30s", consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"kept"], topic="orders", ttl=0.5).ok
        assert producer.produce([b"given back"], topic="orders", ttl=0.5).ok
    with Consumer(node.send_dsn, context=context) as consumer:
        kept, given_back = consumer.receive(5), consumer.receive(5)
        assert kept is not None and given_back is not None
        node.wait_stats(lambda s: s["expired_lingering"] == 2, 10)  # swept, both out
        kept.ack()  # accepted: it was delivered in time
        given_back.nack()  # back after its expiry: to the dead letters, not again
        assert consumer.receive(0.5) is None
    node.wait_stats(lambda s: s["messages"] == 0 and s["dead_letters"] == 1
                    and s["acked"] == 1 and s["ttl_expired"] == 1, 10)
    [line] = dead_lines(node)
    assert "deliveries=1" in line and line.endswith("reason=expired")


def test_a_topic_s_max_age_expires_its_older_messages(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    answer = request_monitor(node.monitor_dsn, "DECLARE TOPIC orders max_age=400ms", 10)
    assert answer == b"topic orders max_age_us=400000\n"
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"old"], topic="orders").ok
        assert producer.produce([b"other topic"], topic="clicks").ok
    # swept in the background: no consumer is there
    node.wait_stats(lambda s: s["ttl_expired"] == 1 and s["dead_letters"] == 1, 10)
    answer = request_monitor(node.monitor_dsn, "DECLARE TOPIC clicks max_age=1h", 10)
    assert answer == b"topic clicks max_age_us=3600000000\n"  # younger: kept
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(5)
        assert message is not None and message.parts[0] == b"other topic"
        message.ack()
        assert consumer.receive(0.3) is None
    stats = node.stats()
    assert (stats["ttl_expired"], stats["dead_letters"], stats["messages"]) == (1, 1, 0)


def test_the_node_s_max_age_and_on_expire_are_the_default_topic_s(start_inproc_node,
                                                                     context):
    node = start_inproc_node("--max-age", "300ms", "--on-expire", "drop", consume=False,
                             tcp=True)
    topic = node.stats()["topics"]["default"]
    assert (topic["max_age_us"], topic["on_expire"]) == (300_000, "drop")
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"no topic"]).ok
    let_time_pass(0.5)
    with Consumer(node.send_dsn, context=context) as consumer:
        assert consumer.receive(0.5) is None
    stats = node.stats()
    assert (stats["ttl_expired"], stats["dead_letters"], stats["messages"]) == (1, 0, 0)


def test_a_scheduled_message_that_expires_before_its_time_is_never_delivered(
        start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"too late"], topic="orders", delay=0.5, ttl=0.2).ok
        assert producer.produce([b"in time"], topic="orders", delay=0.5, ttl=60).ok
    node.wait_stats(lambda s: s["scheduled"] == 0 and s["ttl_expired"] == 1, 10)
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(5)
        assert message is not None and message.parts[0] == b"in time"
        message.ack()
        assert consumer.receive(0.3) is None
    [line] = dead_lines(node)
    assert line.endswith("reason=expired")


# On a daemon: the point is the SIGKILL.
def test_expiry_holds_across_a_sigkill(start_node, context):
    node = start_node()
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"expires"], topic="orders", ttl=2).ok
        assert producer.produce([b"stays"], topic="orders").ok
    node.kill()
    let_time_pass(2.2)  # it expires while the node is down
    node.restart()
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None and message.parts[0] == b"stays"
        message.ack()
        assert consumer.receive(0.5) is None
    node.wait_figures(lambda f: f["messages"] == 0)


# -- the tools ----------------------------------------------------------------------------

def test_the_tools_declare_expiry_and_send_time_headers(start_inproc_node):
    node = start_inproc_node(consume=False, tcp=True)
    declared = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "orders",
                    "--max-age", "1h", "--on-expire", "drop", "--priorities")
    assert (declared.returncode, declared.stdout) == (
        0, "topic orders max_age_us=3600000000 on_expire=drop priorities=on\n"), \
        declared.stderr
    sent = tool("pzq-produce", "--dsn", node.receive_dsn, "--topic", "orders", "--delay",
                "1d", "--ttl", "2d", "--priority", "9", input="later\n")
    assert sent.returncode == 0, sent.stderr
    stats = node.stats()
    assert (stats["scheduled"], stats["topics"]["orders"]["scheduled"]) == (1, 1)
    refused = tool("pzq-produce", "--dsn", node.receive_dsn, "--delay", "1s",
                   "--not-before", "2026-12-01T09:00:00Z", input="x\n")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        "--delay and --not-before go alone: one time to deliver from")
    bad = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "orders",
               "--on-expire", "keep")
    assert bad.returncode == 2 and "invalid choice: 'keep'" in bad.stderr


def test_the_tools_take_a_max_age_and_priorities_away(start_inproc_node):
    """As DECLARE's max_age=0 and priorities=off do: what a node's --max-age or
    --send-priorities set on the default topic stays there after a start without them."""
    node = start_inproc_node("--max-age", "1h", "--send-priorities", consume=False, tcp=True)
    topic = node.stats()["topics"]["default"]
    assert (topic["max_age_us"], topic["priorities"]) == (3_600_000_000, True), topic
    for zero in ("0", "0s"):
        undone = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "default",
                      "--max-age", zero, "--no-priorities")
        assert (undone.returncode, undone.stderr) == (0, "")
        topic = node.stats()["topics"]["default"]
        assert (topic.get("max_age_us", 0), topic.get("priorities", False)) == (0, False), topic
    refused = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "default",
                   "--max-age", "-1s")
    assert refused.returncode == 2 and "give a duration above 0" in refused.stderr


# -- lag in seconds ---------------------------------------------------------------------

def test_lag_seconds_is_the_age_of_the_oldest_message_not_acked_held_or_not(
        start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders billing"):
        assert not request_monitor(node.monitor_dsn, command, 10).startswith(b"ERROR")
    stats = node.stats()
    assert (stats["lag_seconds"], stats["topics"]["orders"]["oldest_seconds"],
            stats["topics"]["orders"]["groups"]["billing"]["lag_seconds"]) == (0, 0, 0)
    before = now_us()
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"first"], topic="orders").ok
        assert producer.produce([b"second"], topic="orders").ok
        assert producer.produce([b"elsewhere"], topic="clicks").ok
    let_time_pass(0.5)
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as group:
        first = group.receive(5)
        assert first is not None and first.parts[0] == b"first"  # held, not acked
        stats = node.stats()
        orders = stats["topics"]["orders"]
        waited = (now_us() - before) / 1e6
        assert 0.5 <= orders["groups"]["billing"]["lag_seconds"] <= waited
        assert 0.5 <= orders["oldest_seconds"] <= waited
        assert 0.5 <= stats["topics"]["clicks"]["oldest_seconds"] <= waited
        assert 0.5 <= stats["lag_seconds"] <= waited  # default, on --send-dsn: clicks
        topics = request_monitor(node.monitor_dsn, "TOPICS", 10).decode()
        assert re.search(r"^orders messages=2 .* oldest_seconds=\d+\.\d+$", topics, re.M)
        assert re.search(r"^  group billing backlog=2 .* lag_seconds=\d+\.\d+$", topics, re.M)
        metrics = scrape_metrics(node.monitor_dsn)
        assert re.search(r'pzq_group_lag_seconds\{[^}]*group="billing"[^}]*\} 0\.[5-9]|'
                         r'pzq_group_lag_seconds\{[^}]*group="billing"[^}]*\} [1-9]', metrics)
        assert re.search(r'pzq_topic_oldest_seconds\{[^}]*topic="orders"\} ', metrics)
        group.ack(first)
        second = group.receive(5)
        assert second is not None
        group.ack(second)
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["lag_seconds"] == 0
                    and s["topics"]["orders"]["oldest_seconds"] == 0)


def test_a_topic_s_oldest_is_found_behind_more_than_one_walk_of_other_topics(
        start_inproc_node, context):
    """A topic without named groups found at once (``first``) held every later walk at
    its first message: ``last``, behind more than one walk's WALK_AT_MOST messages of
    another topic, read 0 at every ask."""
    node = start_inproc_node(consume=False, tcp=True)
    with Producer(node.receive_dsn, window=1000, context=context) as producer:
        assert producer.produce([b"oldest"], topic="first").ok
        for number in range(3 * WALK_AT_MOST):
            producer.send([b"%d" % number], topic="middle")
        assert all(ack.ok for ack in producer.flush(60))
        assert producer.produce([b"behind them"], topic="last").ok
    let_time_pass(0.2)
    for _ in range(10):  # a walk each, WALK_AT_MOST further each
        oldest = {name: figures["oldest_seconds"]
                  for name, figures in node.stats()["topics"].items()}
        assert oldest["first"] > 0 and oldest["middle"] > 0
        if oldest["last"] > 0:
            break
    assert oldest["last"] > 0, oldest


def test_a_scheduled_message_s_lag_counts_from_its_due_time(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    before = now_us()
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"later"], topic="orders", delay=0.6).ok
    node.wait_stats(lambda s: s["scheduled"] == 0, 10)
    let_time_pass(0.2)
    stats = node.stats()
    since_stored = (now_us() - before) / 1e6
    assert 0.2 <= stats["lag_seconds"] <= since_stored - 0.5
    assert 0.2 <= stats["topics"]["orders"]["oldest_seconds"] <= since_stored - 0.5


# -- every producer shell -------------------------------------------------------------------

def test_every_producer_shell_sends_the_time_options(start_inproc_node, context, aio_context):
    node = start_inproc_node("--partitions", "orders=2", consume=False, tcp=True)
    later = datetime.now(UTC) + timedelta(hours=1)
    with RoutedProducer(node.monitor_dsn, "orders", context=context) as routed:
        routed.send([b"routed"], key=b"k", delay=60, ttl=3600, priority=9)
        assert all(ack.ok for ack in routed.flush(10))

    async def the_asyncio_shells() -> None:
        async with aio.Producer(node.receive_dsn, context=aio_context) as producer:
            ack = await producer.send([b"aio"], topic="plain", not_before=later, priority=1)
            assert ack.ok
            future = await producer.publish([b"aio published"], topic="plain", delay=30)
            await producer.flush(10)
            assert future.result().ok
            with pytest.raises(ValueError, match="priority must be"):
                await producer.send([b"bad"], topic="plain", priority=10)
        async with aio.RoutedProducer(node.monitor_dsn, "orders",
                                      context=aio_context) as routed_aio:
            assert (await routed_aio.send([b"aio routed"], key=b"k", expires=later,
                                          delay=60)).ok

    asyncio.run(the_asyncio_shells())
    stats = node.stats()
    assert (stats["topics"]["orders"]["scheduled"], stats["topics"]["plain"]["scheduled"],
            stats["rejected"]) == (2, 2, 0)


# -- priorities ---------------------------------------------------------------------------

def produce_prioritised(node, context, messages: list[tuple[bytes, int | None]],
                        topic: str | None = "orders") -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for body, priority in messages:
            producer.send([body], topic=topic, priority=priority)
        assert all(ack.ok for ack in producer.flush(10))


def take_all(consumer, count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        message = consumer.receive(10)
        assert message is not None, f"only {got}"
        got.append(message.parts[0])
        message.ack()
    return got


BACKLOG_AND_URGENT = [(b"b0", None), (b"b1", 0), (b"p5a", 5), (b"p9a", 9), (b"b2", None),
                      (b"p5b", 5), (b"p9b", 9), (b"b3", None)]
BY_PRIORITY = [b"p9a", b"p9b", b"p5a", b"p5b", b"b0", b"b1", b"b2", b"b3"]


def test_a_topic_with_priorities_delivers_9_first_and_fifo_within_a_priority(
        start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    assert request_monitor(node.monitor_dsn, "DECLARE TOPIC orders priorities=on", 10) == \
        b"topic orders priorities=on\n"
    produce_prioritised(node, context, BACKLOG_AND_URGENT)
    produce_prioritised(node, context, BACKLOG_AND_URGENT, topic="plain")  # no priorities
    with Consumer(node.send_dsn, context=context) as consumer:
        got = take_all(consumer, 16)
    assert [body for body in got[:8]] == BY_PRIORITY
    assert got[8:] == [body for body, _ in BACKLOG_AND_URGENT]  # plain: as they came
    node.wait_stats(lambda s: s["messages"] == 0)


def test_priorities_hold_across_a_restart_and_for_named_groups(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    for command in ("DECLARE TOPIC orders priorities=on", "DECLARE GROUP orders billing"):
        assert not request_monitor(node.monitor_dsn, command, 10).startswith(b"ERROR")
    produce_prioritised(node, context, BACKLOG_AND_URGENT)
    node.restart()
    with GroupConsumer(node.consume_dsn, "orders", "billing", window=1,
                       context=context) as group:
        got = []
        for _ in range(8):
            message = group.receive(10)
            assert message is not None
            got.append(message.parts[0])
            group.ack(message)
    assert got == BY_PRIORITY


def test_an_urgent_message_overtakes_the_backlog_not_what_is_out(start_inproc_node, context):
    node = start_inproc_node(*FAST, tcp=True)
    for command in ("DECLARE TOPIC orders priorities=on", "DECLARE GROUP orders billing"):
        assert not request_monitor(node.monitor_dsn, command, 10).startswith(b"ERROR")
    produce_prioritised(node, context, [(b"b0", None), (b"b1", None), (b"b2", None)])
    with GroupConsumer(node.consume_dsn, "orders", "billing", window=1,
                       context=context) as group:
        first = group.receive(10)
        assert first is not None and first.parts[0] == b"b0"  # out: not recalled
        produce_prioritised(node, context, [(b"urgent", 9)])
        group.ack(first)
        got = []
        for _ in range(3):
            message = group.receive(10)
            assert message is not None
            got.append(message.parts[0])
            group.ack(message)
    assert got == [b"urgent", b"b1", b"b2"]


def test_the_node_option_gives_the_default_topic_priorities(start_inproc_node, context):
    node = start_inproc_node("--send-priorities", consume=False, tcp=True)
    assert node.stats()["topics"]["default"]["priorities"] is True
    produce_prioritised(node, context, [(b"low", None), (b"high", 9)], topic=None)
    with Consumer(node.send_dsn, context=context) as consumer:
        assert take_all(consumer, 2) == [b"high", b"low"]


# -- the archive ----------------------------------------------------------------------------

def test_the_archive_keeps_a_message_s_time_headers_as_produced(start_inproc_node, context,
                                                                tmp_path):
    archive = tmp_path / "archive"
    node = start_inproc_node("--archive-dir", str(archive), "--flush-interval", "50",
                             consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"timed"], topic="orders", ttl=3600, priority=9).ok
        assert producer.produce([b"plain"], topic="orders").ok
    with Consumer(node.send_dsn, context=context) as consumer:
        assert sorted(take_all(consumer, 2)) == [b"plain", b"timed"]
    node.wait_stats(lambda s: s["archive"]["archived"] == 2, message="archived")
    node.wait_archive_durable()
    archived = {message.parts[0]: message for _, message in read_topic(archive, "orders")}
    assert archived[b"timed"].times == ("TTL:3600000", "PRIORITY:9")
    assert archived[b"plain"].times == ()


def test_pzq_ctl_takes_a_topics_max_age_and_priorities_away(start_inproc_node):
    # the monitor's max_age=0 and priorities=off had no pzq-ctl words: --max-age 0 was
    # 'give a duration above 0' and --priorities could only turn them on
    node = start_inproc_node(consume=False, tcp=True)

    def declare(*options: str) -> str:
        ran = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "orders", *options)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout

    assert declare("--max-age", "1h", "--priorities") == \
        "topic orders max_age_us=3600000000 priorities=on\n"
    assert declare("--max-age", "0s") == "topic orders priorities=on\n"
    assert declare("--no-priorities") == "topic orders\n"
    assert node.stats()["topics"]["orders"]["max_age_us"] == 0
    assert node.stats()["topics"]["orders"]["priorities"] is False
