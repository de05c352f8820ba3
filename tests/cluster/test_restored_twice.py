"""The same backup of a cluster node restored twice: the second restored node skips
past the seqs the first gave out (one more per µs since the snapshot), its lost_seqs
cover them, and the peers deliver the first's messages they hold. With a skip of
2**48 alone it gave them out again: the first's 30 messages, ACKed and copied, were
never delivered."""

from __future__ import annotations

import pytest

from tests.cluster.test_restored_node import (
    Deliveries,
    produce,
    restore,
    start_three,
    take_backup,
)

pytestmark = pytest.mark.timeout(240)


def test_a_backup_restored_twice_loses_nothing_the_first_restored_node_stored(
        start_node, context, closing, tmp_path):
    nodes = start_three(start_node, tmp_path)
    acked = produce(nodes[0], context, 0, 20)
    take_backup(nodes[0], tmp_path / "backup")
    nodes[0].kill()
    restore(nodes[0], tmp_path / "backup", tmp_path / "first")
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    acked |= produce(nodes[0], context, 20, 30)  # the first restored node's, copied
    nodes[0].kill()
    restore(nodes[0], tmp_path / "backup", tmp_path / "second")
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    acked |= produce(nodes[0], context, 50, 30)
    deliveries = Deliveries(nodes, context, closing)
    deliveries.until(acked, 60)
    deliveries.settle(2)
    assert set(deliveries.counts) == acked
    assert [body for body, count in deliveries.counts.items() if count > 1] == []
