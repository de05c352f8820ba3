"""The figures of one partition scenario, from the tally and the nodes' STATS."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tests.support.partition_load import StatsSampler, Tally

if TYPE_CHECKING:
    from tests.support.partition_scenarios import Run


@dataclass
class Report:
    scenario: str
    replicas: int
    produced: int = 0
    acked_ok: int = 0  # "1" without REPLICATION_FAILED
    acked_replication_failed: int = 0
    refused: int = 0  # "0"
    consumed: int = 0  # distinct messages delivered at least once
    lost: int = 0  # ACKed "1" without REPLICATION_FAILED, never consumed
    lost_replication_failed: int = 0  # ACKed with REPLICATION_FAILED, never consumed
    delivered_more_than_once: int = 0
    extra_deliveries: int = 0
    delivered_by_two_nodes: int = 0
    takeover_deliveries: int | None = None  # deliveries after the origin was killed
    longest_gap_s: float = 0.0  # no delivery at all, from the first send to the drain
    # After the drain and the settle time (before any kill after the drain), and at the end.
    copies_left: dict[str, dict[str, Any]] = field(default_factory=dict)
    copies_at_end: dict[str, dict[str, Any]] = field(default_factory=dict)
    negatives: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def copies_left_total(self) -> int:
        return sum(int(node["replicas_held"]) for node in self.copies_left.values())

    @property
    def copies_left_per_node(self) -> str:
        nodes = sorted(self.copies_left.items())
        return " / ".join(str(figures["replicas_held"]) for _, figures in nodes)

    @property
    def negative(self) -> bool:
        return bool(self.negatives)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "copies_left_total": self.copies_left_total,
                "copies_left_per_node": self.copies_left_per_node, "negative": self.negative}


def build_report(name: str, replicas: int, run: Run, sampler: StatsSampler, drained_at: float,
                 settled: dict[int, dict[str, Any]], final: dict[int, dict[str, Any]],
                 peer_names: dict[str, str], errors: list[str]) -> Report:
    """``settled`` and ``final``: the STATS of every running node after the drain and
    the settle time, and at the end."""
    tally = run.tally
    report = Report(name, replicas, errors=errors, timeline=run.timeline,
                    takeover_deliveries=run.takeover_deliveries)
    _count(report, tally)
    report.longest_gap_s = longest_gap(tally, run.started, drained_at)
    for node, figures in sorted(settled.items()):
        report.copies_left[f"node{node}"] = copies_of(figures, peer_names)
    for node, figures in sorted(final.items()):
        report.copies_at_end[f"node{node}"] = copies_of(figures, peer_names)
    seen: set[tuple[int, str]] = set()
    for negative in sampler.negatives:
        if (negative.node, negative.figure) not in seen:
            seen.add((negative.node, negative.figure))
            report.negatives.append(f"node{negative.node} {_name(negative.figure, peer_names)} "
                                    f"= {negative.value}")
    return report


def _count(report: Report, tally: Tally) -> None:
    consumed = set(tally.deliveries)
    report.produced = len(tally.sent)
    report.acked_ok = len(tally.acked_ok)
    report.acked_replication_failed = len(tally.acked_replication_failed)
    report.refused = len(tally.refused)
    report.consumed = len(consumed)
    report.lost = len(tally.acked_ok - consumed)
    report.lost_replication_failed = len(tally.acked_replication_failed - consumed)
    counts = [len(times) for times in tally.deliveries.values()]
    report.delivered_more_than_once = sum(1 for count in counts if count > 1)
    report.extra_deliveries = sum(count - 1 for count in counts)
    report.delivered_by_two_nodes = sum(
        1 for times in tally.deliveries.values() if len({node for _, node in times}) > 1)


def longest_gap(tally: Tally, start: float, end: float) -> float:
    moments = sorted(t for times in tally.deliveries.values() for t, _ in times
                     if start <= t <= end)
    edges = [start, *moments, end]
    return round(max(b - a for a, b in zip(edges, edges[1:], strict=False)), 3)


def copies_of(figures: dict[str, Any], peer_names: dict[str, str]) -> dict[str, Any]:
    """A node's copies held (in all, and per origin peer) and removes it owes."""
    return {
        "replicas_held": figures["replicas_held"],
        "tombstones_held": figures.get("tombstones_held", 0),
        "peers": {peer_names.get(peer["endpoint"], peer["endpoint"]): {
            "state": peer["state"],
            "replicas_held": peer["replicas_held"],
            **({"removes_owed": peer["removes_owed"]} if "removes_owed" in peer else {}),
        } for peer in figures["peers"]},
    }


def _name(figure: str, peer_names: dict[str, str]) -> str:
    for endpoint, name in peer_names.items():
        figure = figure.replace(endpoint, name)
    return figure
