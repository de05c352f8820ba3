"""Prometheus families the endpoints declare (pzq.node.endpoints: the ZPER writer, ack
and relay), and those of the archive's topics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pzq.client.monitor import StatsAnswer
from pzq.endpoints import Endpoint
from pzq.node.endpoints import ENDPOINTS

LABELS = ["node", "monitor"]
TOPIC_GAUGES = (
    ("pzq_archive_bytes", "bytes", "Bytes of a topic's log on disk."),
    ("pzq_archive_flushed_offset", "flushed_offset", "End of what the last fsync of a "
     "topic's log made durable."),
)


def endpoint_families(live: list[StatsAnswer], labels_of: Callable[[StatsAnswer], list[str]],
                      endpoints: tuple[Endpoint, ...] = ENDPOINTS) -> Iterator[Metric]:
    """Every endpoint's counters, then every endpoint's gauges, each from the key of the
    endpoint's STATS section, for each node that has the section's top."""
    stats = [(answer.stats or {}, labels_of(answer)) for answer in live]
    for counters in (True, False):
        family = CounterMetricFamily if counters else GaugeMetricFamily
        for endpoint in endpoints:
            for declared in endpoint.metrics:
                if declared.counter != counters:
                    continue
                metric = family(declared.name, declared.help, labels=LABELS)
                for figures, labels in stats:
                    if not endpoint.stats or figures.get(endpoint.stats[0]):
                        section = _section(figures, endpoint.stats)
                        metric.add_metric(labels, float(section.get(declared.key, 0)))
                yield metric
    for name, key, documentation in TOPIC_GAUGES:
        metric = GaugeMetricFamily(name, documentation, labels=[*LABELS, "topic"])
        for figures, labels in stats:
            for topic, info in (figures.get("archive") or {}).get("topics", {}).items():
                metric.add_metric([*labels, topic], float(info.get(key, 0)))
        yield metric


def _section(figures: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    for key in path:
        figures = figures.get(key) or {}
    return figures
