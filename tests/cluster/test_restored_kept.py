"""A node restored from a backup tells each peer what it lost (RESTORED) until the peer
confirms it keeps it on disk (RESTORED_KEPT): a peer SIGKILLed after confirming still
delivers its copies of the lost seqs, untold; a peer down through the restore is told
when it is back, and confirms; a peer drops the ranges once it holds no copy in them,
across a restart too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.test_restored_node import (
    Deliveries,
    produce,
    restore,
    start_three,
    take_backup,
)
from tests.support.harness import NodeProcess

pytestmark = pytest.mark.timeout(240)

BEFORE, AFTER = 100, 300  # produced before the backup, and after it


def peer(node: NodeProcess, endpoint: str) -> dict:
    return peer_in(node.stats(), endpoint)


def peer_in(stats: dict, endpoint: str) -> dict:
    return next(each for each in stats["peers"] if each["endpoint"] == endpoint)


def all_up(nodes: list[NodeProcess]) -> None:
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]), 30,
                        "every peer up")


def test_each_peer_confirms_what_the_restore_lost_and_keeps_it_through_a_kill(
        start_node, context, closing, tmp_path: Path):
    nodes = start_three(start_node, tmp_path)
    endpoints = [f"ipc://{tmp_path}/node{i}.cluster" for i in range(3)]
    acked = produce(nodes[0], context, 0, BEFORE)
    take_backup(nodes[0], tmp_path / "backup")
    acked |= produce(nodes[0], context, BEFORE, AFTER)  # in no backup: the peers' copies
    assert all(node.stats()["replicas_held"] > 0 for node in nodes[1:])
    nodes[0].kill()
    nodes[2].kill()  # down through the restore
    restore(nodes[0], tmp_path / "backup", tmp_path / "restored")
    origin = nodes[0].event("backup_restored")["node_id"]

    wait = 30
    nodes[0].wait_stats(lambda s: peer_in(s, endpoints[1])["restored_confirmed"], wait,
                        "node1 confirmed the lost seqs")
    kept = nodes[1].stats()["restored_seqs_kept"]
    assert list(kept) == [origin]
    assert peer(nodes[0], endpoints[2])["restored_confirmed"] is False

    nodes[1].kill()  # after confirming: what it keeps comes back from its store
    nodes[1].restart()
    nodes[2].restart()  # back: told, and confirms
    all_up(nodes)
    nodes[0].wait_stats(lambda s: peer_in(s, endpoints[2])["restored_confirmed"], wait,
                        "node2, back, confirmed the lost seqs")
    assert nodes[1].stats()["restored_seqs_kept"] == kept
    sent = {endpoint: peer(nodes[0], endpoint)["restored_sent"] for endpoint in endpoints[1:]}
    assert all(count >= 1 for count in sent.values()), sent
    confirmed_at = time.monotonic()

    deliveries = Deliveries(nodes, context, closing)
    deliveries.until(acked, 90)
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0 and not s["takeovers"]
                        and s["restored_seqs_kept"] == {}, 30,
                        "the copies removed and the lost seqs dropped")
        dropped = node.event("restored_seqs_dropped")
        assert dropped is not None and dropped["origin"] == origin
    deliveries.settle(2)  # (heartbeats go on meanwhile: one a second here)
    assert set(deliveries.counts) == acked
    twice = sorted(body for body, count in deliveries.counts.items() if count > 1)
    assert not twice, f"{len(twice)} delivered more than once, e.g. {twice[:3]}"

    # Told no more since both confirmed; node1 delivered its copies untold since its kill
    assert time.monotonic() - confirmed_at > 2
    assert {endpoint: peer(nodes[0], endpoint)["restored_sent"]
            for endpoint in endpoints[1:]} == sent
    assert peer(nodes[1], endpoints[0])["restored_received"] == 0
    assert peer(nodes[2], endpoints[0])["restored_received"] == sent[endpoints[2]]

    nodes[2].kill()  # the drop is on disk too
    nodes[2].restart()
    all_up(nodes)
    assert nodes[2].stats()["restored_seqs_kept"] == {}
