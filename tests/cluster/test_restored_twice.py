"""The same backup of a cluster node restored twice: the second restored node gives
out again the sequence numbers the first gave out after its skip, which no lost_seqs
names (docs/operations.rst, Restore: restore a given backup once)."""

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


@pytest.mark.xfail(strict=True, reason="a second restore of one backup reuses the first "
                                       "restored node's seqs: its messages are lost")
def test_a_backup_restored_twice_loses_what_the_first_restored_node_stored(
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
    deliveries.until(acked, 20)  # (30 of them never come)
