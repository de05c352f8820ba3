"""Prometheus families per topic and per consumer group, from STATS ``topics``.

Topic series carry ``topic``, group series ``topic`` and ``group`` besides the
node's own labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pzq.client.monitor import StatsAnswer

Labels = Callable[[StatsAnswer], list[str]]

TOPIC_GAUGES = (
    ("pzq_topic_messages_stored", "messages", "Messages of the topic stored."),
    ("pzq_topic_stored_bytes", "bytes", "Bytes of the topic's stored messages."),
    ("pzq_topic_scheduled", "scheduled",
     "Messages of the topic stored with a time to deliver them from (DELAY, NOT-BEFORE) "
     "that has not come."),
    ("pzq_topic_oldest_seconds", "oldest_seconds",
     "Age of the topic's oldest stored message (since its due time, if scheduled)."),
    ("pzq_topic_next_due_timestamp_seconds", "next_due_us",
     "When the topic's next scheduled message is due, in seconds since the epoch (0: none "
     "waits)."),
)
# counts since the node started: counters (``_total``), reset by a restart
TOPIC_COUNTERS = (
    ("pzq_topic_ttl_expired", "ttl_expired",
     "Messages of the topic past their TTL, EXPIRES or max_age since the node started."),
)
SCALES = {"next_due_us": 1e-6}  # µs in STATS, seconds here
GROUP_GAUGES = (
    ("pzq_group_backlog", "backlog", "Stored messages the group holds and is not done with."),
    ("pzq_group_messages_inflight", "inflight", "The group's deliveries awaiting an ACK."),
    ("pzq_group_messages_ready", "ready", "The group's messages waiting to go again."),
    ("pzq_group_messages_delayed", "delayed",
     "The group's messages waiting out a backoff or a delayed NACK."),
    ("pzq_group_lag", "lag", "The group's backlog not yet delivered (less what is out)."),
    ("pzq_group_lag_seconds", "lag_seconds",
     "Age of the oldest message the group has not ACKed, out at a consumer or not."),
    ("pzq_group_consumers", "consumers", "Consumers of the group connected."),
    ("pzq_group_oldest_unacked_seconds", "oldest_unacked_seconds",
     "Age of the group's oldest unacked delivery."),
    ("pzq_group_longest_consumer_idle_seconds", "longest_idle_seconds",
     "The longest any connected consumer of the group has sent no request (a hung one)."),
)
GROUP_COUNTERS = (
    ("pzq_group_delivered", "delivered", "The group's deliveries, first ones and again."),
    ("pzq_group_redelivered", "redelivered", "The group's deliveries of messages delivered "
     "to it before."),
    ("pzq_group_acked", "acked", "ACKs by the group's consumers."),
    ("pzq_group_nacked", "nacked", "Deliveries the group's consumers gave back."),
    ("pzq_group_expired", "expired", "The group's deliveries not ACKed in time."),
    ("pzq_group_dead_lettered", "dead_lettered", "Messages the group gave up."),
)


PARTITION_GAUGES = (
    ("pzq_topic_partitions", "partitions", "Partitions of the topic (partitioned topics)."),
    ("pzq_topic_partitions_owned", "partitions_owned",
     "Partitions of the topic this node owns now."),
)


def topic_families(live: list[StatsAnswer], labels_of: Labels) -> Iterator[Metric]:
    yield from _per_topic(live, labels_of)
    for name, key, documentation in PARTITION_GAUGES:
        gauge = GaugeMetricFamily(name, documentation, labels=["node", "monitor", "topic"])
        for answer, topic, figures in _topics(live):
            if key in figures:  # a list of partitions counts as its length
                value = figures[key]
                gauge.add_metric([*labels_of(answer), topic],
                                 float(len(value) if isinstance(value, list) else value))
        yield gauge
    for family, table in ((GaugeMetricFamily, GROUP_GAUGES),
                          (CounterMetricFamily, GROUP_COUNTERS)):
        for name, key, documentation in table:
            metric: GaugeMetricFamily | CounterMetricFamily = family(
                name, documentation, labels=["node", "monitor", "topic", "group"])
            for answer, topic, figures in _topics(live):
                for group, group_figures in figures.get("groups", {}).items():
                    metric.add_metric([*labels_of(answer), topic, group],
                                      float(group_figures.get(key, 0)))
            yield metric


def _per_topic(live: list[StatsAnswer], labels_of: Labels) -> Iterator[Metric]:
    for family, table in ((GaugeMetricFamily, TOPIC_GAUGES),
                          (CounterMetricFamily, TOPIC_COUNTERS)):
        for name, key, documentation in table:
            metric: GaugeMetricFamily | CounterMetricFamily = family(
                name, documentation, labels=["node", "monitor", "topic"])
            for answer, topic, figures in _topics(live):
                metric.add_metric([*labels_of(answer), topic],
                                  float(figures.get(key, 0)) * SCALES.get(key, 1))
            yield metric


def _topics(live: list[StatsAnswer]) -> Iterator[tuple[StatsAnswer, str, dict[str, Any]]]:
    for answer in live:
        for topic, figures in ((answer.stats or {}).get("topics") or {}).items():
            yield answer, topic, figures
