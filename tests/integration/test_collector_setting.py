"""A daemon runs with its garbage collector set (pzq.node.collector) and says so."""

from __future__ import annotations

from pzq.bench.nodes import NodeProcess
from pzq.node.collector import GEN0_THRESHOLD


def test_daemon_tunes_its_collector(node: NodeProcess) -> None:
    tuned = node.event("collector_tuned")
    assert tuned is not None, node.stderr_lines[-5:]
    assert tuned["thresholds"][0] == GEN0_THRESHOLD
    assert tuned["frozen"] > 1000  # start-up's modules and configuration
