"""A restored node's lost seqs that were scheduled or had a TTL: the peers holding
their copies release a scheduled one at its time (not at the RESTORED, not never),
once, and let one whose TTL passed go undelivered."""

from __future__ import annotations

import time

import pytest

from pzq.client import Consumer, Producer
from tests.cluster.test_restored_node import (
    produce,
    restart_all,
    restore,
    start_three,
    take_backup,
)
from tests.cluster.test_time_cluster import in_seconds, receive_all
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(240)

DUE_IN = 30.0  # seconds from its production: room for the kills, the restore, the TTL
TTL = 6.0


@pytest.mark.parametrize("killed_again", [False, True])
def test_peers_release_a_lost_scheduled_message_at_its_time_and_expire_a_lost_ttl(
        start_node, context, closing, tmp_path, killed_again):
    """killed_again: every node SIGKILLed right after the restore and started again (the
    peers forget what they were told; the copies and their times are kept)."""
    nodes = start_three(start_node, tmp_path)
    acked = produce(nodes[0], context, 0, 20)
    take_backup(nodes[0], tmp_path / "backup")
    # In no backup: the peers' copies alone, of a scheduled one, one with a TTL, a plain one
    due_us = in_seconds(DUE_IN)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        acks = [producer.produce([b"scheduled"], not_before=due_us),
                producer.produce([b"expires"], ttl=TTL),
                producer.produce([b"plain"])]
    expires_at = time.time() + TTL
    assert all(ack.ok and not ack.replication_failed for ack in acks), acks
    assert sum(node.stats()["scheduled_copies_held"] for node in nodes[1:]) == 1
    nodes[0].kill()
    restore(nodes[0], tmp_path / "backup", tmp_path / "restored")
    origin = nodes[0].event("backup_restored")["node_id"]
    if killed_again:
        restart_all(nodes)
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    wait_until(lambda: any(node.stats()["takeovers"] == [origin] for node in nodes[1:]), 30,
               message="the restored takeover")
    # No consumer until the TTL has passed: the copy with it must not come after
    wait_until(lambda: time.time() > expires_at + 0.5, TTL + 1, message="the TTL passed")
    assert time.time() < due_us / 1e6 - 3, "too slow a restore for this test's timing"
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes]
    delivered: list[tuple[bytes, float]] = []
    wanted = acked | {b"plain", b"scheduled"}
    wait_until(lambda: receive_all(consumers, delivered) or
               wanted <= {body for body, _ in delivered}, DUE_IN + 30, interval=0,
               message="every message delivered, the scheduled one too")
    came = {body: at for body, at in delivered}
    print("scheduled message delivered", round(came[b"scheduled"] - due_us / 1e6, 3),
          "s after its time")
    assert due_us / 1e6 <= came[b"scheduled"] < due_us / 1e6 + 10, (
        came[b"scheduled"] - due_us / 1e6)
    end = time.time() + 2
    while time.time() < end:  # a second delivery, or the expired one, would come now
        receive_all(consumers, delivered)
    bodies = [body for body, _ in delivered]
    assert b"expires" not in bodies
    assert sorted(bodies) == sorted(wanted)  # each once
    wait_until(lambda: sum(node.stats()["ttl_expired"] for node in nodes[1:]) == 1, 15,
               message="the expired copy let go by its holder")
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0 and s["scheduled_copies_held"] == 0
                        and not s["takeovers"], 30,
                        "the copies gone and the restored takeover ended")
