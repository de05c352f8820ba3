"""Prometheus families of the archive's topics and the ZPER writer, ack and relay."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pzq.client.monitor import StatsAnswer

LABELS = ["node", "monitor"]
# (metric, section of STATS "zper", key, help)
ZPER_COUNTERS = (
    ("pzq_zper_written", "writer", "written", "Messages ZPER producers wrote."),
    ("pzq_zper_written_bytes", "writer", "bytes", "Bytes of the frames ZPER producers wrote."),
    ("pzq_zper_refused", "writer", "refused",
     "ZPER writes refused: bad identity, hash or mode, or a topic not theirs."),
    ("pzq_zper_responses", "writer", "responses", "Replies sent to ZPER producers."),
    ("pzq_zper_acks_published", "ack", "published",
     "ZPAck acks sent (to every subscriber of their topic, or to none)."),
    ("pzq_zper_acks_dropped", "ack", "dropped",
     "ZPAck acks dropped: a subscriber's queue and the node's backlog were full."),
    ("pzq_zper_relayed", "relay", "relayed", "Records pushed to ZPER relay clients."),
)
ZPER_GAUGES = (
    ("pzq_zper_ack_subscriptions", "ack", "subscriptions", "Open ZPAck subscriptions."),
    ("pzq_zper_acks_waiting", "ack", "waiting",
     "ZPAck acks kept until a subscriber's queue has room."),
    ("pzq_zper_relay_clients", "relay", "clients", "ZPER relay clients connected."),
)
TOPIC_GAUGES = (
    ("pzq_archive_bytes", "bytes", "Bytes of a topic's log on disk."),
    ("pzq_archive_flushed_offset", "flushed_offset", "End of what the last fsync of a "
     "topic's log made durable."),
)


def zper_families(live: list[StatsAnswer],
                  labels_of: Callable[[StatsAnswer], list[str]]) -> Iterator[Metric]:
    stats = [(answer.stats or {}, labels_of(answer)) for answer in live]
    for family, table in ((CounterMetricFamily, ZPER_COUNTERS), (GaugeMetricFamily, ZPER_GAUGES)):
        for name, section, key, documentation in table:
            metric = family(name, documentation, labels=LABELS)
            for figures, labels in stats:
                zper: dict[str, Any] = figures.get("zper") or {}
                if zper:
                    metric.add_metric(labels, float(zper.get(section, {}).get(key, 0)))
            yield metric
    for name, key, documentation in TOPIC_GAUGES:
        metric = GaugeMetricFamily(name, documentation, labels=[*LABELS, "topic"])
        for figures, labels in stats:
            for topic, info in (figures.get("archive") or {}).get("topics", {}).items():
                metric.add_metric([*labels, topic], float(info.get(key, 0)))
        yield metric
