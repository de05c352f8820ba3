"""Producer de-duplication (DEDUP-ID) on real nodes (in this process, on loopback ports
of their own, but across a SIGKILL a daemon), and its index over a real store."""

from __future__ import annotations

import re

import pytest

from pzq.client import Consumer, Producer, request_monitor
from pzq.store import keyspace
from pzq.store.dedup import DedupIndex
from pzq.store.store import Store
from tests.integration.test_groups import drain
from tests.support.harness import scrape_metrics, wait_until

pytestmark = pytest.mark.timeout(60)


def produce_ids(node, context, ids: list[str], topic: str = "orders") -> list:
    """One message per id, all sent before any ACK is read; the ACKs in send order."""
    with Producer(node.receive_dsn, window=len(ids), context=context) as producer:
        sent = [producer.send([b"body " + dedup_id.encode()], topic=topic, dedup_id=dedup_id)
                for dedup_id in ids]
        acks = {ack.msg_id: ack for ack in producer.flush(15)}
    return [acks[msg_id] for msg_id in sent]


def test_a_repeat_is_stored_once_and_acked_as_a_duplicate(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    first = produce_ids(node, context, ["order-1", "order-2"])
    assert [(ack.ok, ack.duplicate) for ack in first] == [(True, False), (True, False)]
    again = produce_ids(node, context, ["order-1", "order-3"])  # after a lost ACK, say
    assert [(ack.ok, ack.duplicate) for ack in again] == [(True, True), (True, False)]
    assert again[0].status_message == b"DUPLICATE"
    assert node.stats()["duplicates"] == 1
    assert re.search(r"pzq_duplicates_total\{[^}]*\} 1\.0", scrape_metrics(node.monitor_dsn))
    with Consumer(node.send_dsn, context=context) as consumer:
        assert sorted(drain(consumer, 3)) == [b"body order-1", b"body order-2",
                                              b"body order-3"]
        assert consumer.receive(0.3) is None


def test_repeats_in_one_batch_are_answered_once_it_is_written(start_inproc_node, context):
    node = start_inproc_node(consume=False, tcp=True)
    acks = produce_ids(node, context, ["same"] * 5)
    assert all(ack.ok for ack in acks)
    assert sum(not ack.duplicate for ack in acks) == 1
    node.wait_stats(lambda s: s["messages"] == 1)


# On a daemon: the point is the SIGKILL.
def test_ids_are_kept_across_a_sigkill(start_node, context):
    node = start_node()
    assert not produce_ids(node, context, ["kept"])[0].duplicate
    node.kill()
    node.restart()
    assert produce_ids(node, context, ["kept"])[0].duplicate
    assert node.stats()["messages"] == 1


def test_an_id_is_per_topic_and_for_the_topics_window(start_inproc_node, context):
    node = start_inproc_node("--dedup-window", "300ms", "--reaper-frequency", "100ms",
                             consume=False, tcp=True)
    assert not request_monitor(node.monitor_dsn, "DECLARE TOPIC slow dedup_window=1h",
                               10).startswith(b"ERROR")
    for topic in ("orders", "clicks", "slow"):
        assert not produce_ids(node, context, ["x"], topic)[0].duplicate
    # the node's window passes for orders and clicks (each repeat meanwhile is
    # answered DUPLICATE and not stored); slow keeps its id for an hour
    wait_until(lambda: not produce_ids(node, context, ["x"], "orders")[0].duplicate, 20,
               message="the id let go after --dedup-window")
    assert produce_ids(node, context, ["x"], "slow")[0].duplicate
    topics = node.stats()["topics"]
    assert (topics["orders"]["messages"], topics["clicks"]["messages"],
            topics["slow"]["messages"]) == (2, 1, 1)


@pytest.mark.parametrize("header, reason", [
    (b"DEDUP-ID:", b"DEDUP-ID must be 1 to 255 bytes, got 0"),
    (b"dedup-id:" + b"x" * 256, b"DEDUP-ID must be 1 to 255 bytes, got 256")])
def test_a_bad_id_is_refused_and_the_node_goes_on(start_inproc_node, context, header, reason):
    node = start_inproc_node(consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        refused = producer.produce([b"bad"], headers=[header])
        assert (refused.ok, refused.status_message) == (False, reason)
        assert producer.produce([b"good"], dedup_id="fine").ok
    assert node.stats()["messages"] == 1


def test_ids_older_than_the_window_leave_the_store(tmp_path):
    store = Store.open(tmp_path / "db")
    index = DedupIndex(store)
    store.register(index)
    batch = store.begin()
    for n, seen_us in enumerate((100, 200, 300)):
        index.remember(batch, 7, b"id%d" % n, seen_us, seen_before=None)
    store.commit(batch)
    assert index.seen(7, b"id0", 150, window_us=100) and not index.seen(7, b"id0", 201, 100)
    index.expire(before_us=250)
    store.commit(store.begin())
    assert [key for key, _ in store.iterate(keyspace.DEDUP_PREFIX)] == \
        [keyspace.dedup_key(7, b"id2")]
    assert len(list(store.iterate(keyspace.DEDUP_AGE_PREFIX))) == 1
    store.close()
