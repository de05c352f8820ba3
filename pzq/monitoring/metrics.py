"""Prometheus metric families from the nodes' STATS, asked at scrape time.

Every series carries ``node`` (the node id, kept while a node is down) and
``monitor`` (the monitor endpoint it was asked at).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from pzq.client.monitor import StatsAnswer, taken_over_inflight
from pzq.monitoring.endpoint_metrics import endpoint_families
from pzq.monitoring.scrape import Scraper
from pzq.monitoring.topic_metrics import topic_families

LABELS = ["node", "monitor"]

# (metric, STATS key, help) of plain gauges and counters
GAUGES = (
    ("pzq_messages_stored", "messages", "Messages stored and not yet acked."),
    ("pzq_messages_inflight", "messages_inflight", "Deliveries awaiting a consumer ACK."),
    ("pzq_messages_ready", "messages_ready", "Messages waiting to be delivered again."),
    ("pzq_lag_seconds", "lag_seconds", "Age of the oldest message the default group "
     "(--send-dsn) has not ACKed, out at a consumer or not."),
    ("pzq_scheduled", "scheduled",
     "Messages stored with a time to deliver them from that has not come."),
    ("pzq_dead_letters", "dead_letters", "Messages in the dead letters."),
    ("pzq_stored_bytes", "db_size", "Bytes of stored messages."),
    ("pzq_inflight_bytes", "inflight_db_size", "Bytes of messages in flight."),
    ("pzq_consumers_connected", "consumers_connected", "Consumer connections."),
    ("pzq_pending_producer_acks", "pending_producer_acks", "Producer ACKs waiting for room."),
    ("pzq_replicas_held", "replicas_held", "Copies of other nodes' messages held here."),
    ("pzq_scheduled_copies_held", "scheduled_copies_held",
     "Copies of other nodes' scheduled messages held here until released."),
    ("pzq_uptime_seconds", "uptime_seconds", "Seconds since the node started."),
    ("pzq_store_sync_age_seconds", "store_sync_age_s",
     "Seconds since the store's log was last fsync'd."),
    ("pzq_store_unsynced_seconds", "store_unsynced_s",
     "Age of the oldest store write not yet fsync'd: what a power cut would lose (0: none)."),
    ("pzq_store_write_failing", "store_write_failing",
     "1 while the store's writes fail (its last write failed), else 0."),
    ("pzq_store_write_failing_seconds", "store_write_failing_s",
     "Seconds since the store's writes began to fail (0: they succeed)."),
)
COUNTERS = (
    ("pzq_received", "received", "Producer messages received."),
    ("pzq_stored", "stored", "Producer messages written to the store."),
    ("pzq_rejected", "rejected", "Producer messages refused as malformed, too large, forged "
     "or forbidden (--authorization)."),
    ("pzq_queue_full", "queue_full",
     "Producer messages refused with QUEUE_FULL (--max-messages or --max-bytes reached)."),
    ("pzq_duplicates", "duplicates",
     "Producer messages repeating a DEDUP-ID within its window: ACKed, not stored again."),
    ("pzq_delivered", "delivered", "Deliveries sent, first ones and again."),
    ("pzq_redelivered", "redelivered", "Deliveries of messages delivered before."),
    ("pzq_expired", "expired", "Deliveries not ACKed within the ack timeout (delivered again)."),
    ("pzq_ttl_expired", "ttl_expired",
     "Messages past their TTL, EXPIRES or topic max_age: never delivered again."),
    ("pzq_evicted", "evicted",
     "Deliveries pushed out of the in-flight table by --inflight-size (delivered again)."),
    ("pzq_dead_lettered", "dead_lettered", "Messages moved to the dead letters."),
    ("pzq_store_batches", "syncs", "Store batches written."),
    ("pzq_store_log_syncs", "log_syncs", "Store batches written with an fsync of the log."),
    ("pzq_store_failures", "store_failures", "Producer messages refused by a failed write."),
    ("pzq_replication_failures", "replication_failures", "ACKs sent with REPLICATION_FAILED."),
    ("pzq_cluster_rejected", "cluster_rejected", "Cluster frames refused from strangers."),
)
ARCHIVE_COUNTERS = (
    ("pzq_archived", "archived", "Messages appended to the archive."),
    ("pzq_archive_failures", "failures", "Archive appends that failed."),
)
ARCHIVE_GAUGES = (
    ("pzq_archive_fsync_age_seconds", "fsync_age_s", "Seconds since the archive's last fsync."),
    ("pzq_archive_unsynced_seconds", "unsynced_s",
     "Age of the oldest archive record not yet fsync'd: what a power cut would lose (0: none)."),
    ("pzq_archive_write_failing", "write_failing",
     "1 while the archive's appends fail (its last append failed), else 0."),
    ("pzq_archive_write_failing_seconds", "write_failing_s",
     "Seconds since the archive's appends began to fail (0: they succeed)."),
)
ACK_OUTCOMES = ("acked", "nacked")  # a consumer ACK removed the message, or gave it back


class PzqCollector:
    """Asks every node (in parallel) at scrape time, so the figures are never stale."""

    def __init__(self, scraper: Scraper, timeout: float | None = None) -> None:
        self.scraper = scraper
        self.timeout = timeout  # this scrape's wait for each node; None: the scraper's

    def collect(self) -> Iterator[Metric]:
        answers = self.scraper.scrape(self.timeout)
        up = GaugeMetricFamily("pzq_up", "1 if the node answered STATS.", labels=LABELS)
        for answer in answers:
            up.add_metric(self._labels(answer), 1.0 if answer.up else 0.0)
        yield up
        live = [answer for answer in answers if answer.stats is not None]
        yield from self._simple(live)
        yield from self._archive(live)
        yield from endpoint_families(live, self._labels)
        yield from self._labelled(live)
        yield from self._takeovers(live)
        yield from topic_families(live, self._labels)
        yield self._latency(live)

    def _labels(self, answer: StatsAnswer) -> list[str]:
        return [self.scraper.node_id(answer.dsn), answer.dsn]

    def _simple(self, live: list[StatsAnswer]) -> Iterator[Metric]:
        for family, table in ((GaugeMetricFamily, GAUGES), (CounterMetricFamily, COUNTERS)):
            for name, key, documentation in table:
                metric = family(name, documentation, labels=LABELS)
                for answer in live:
                    metric.add_metric(self._labels(answer), float(_stats(answer).get(key, 0)))
                yield metric

    def _archive(self, live: list[StatsAnswer]) -> Iterator[Metric]:
        for family, table in ((CounterMetricFamily, ARCHIVE_COUNTERS),
                              (GaugeMetricFamily, ARCHIVE_GAUGES)):
            for name, key, documentation in table:
                metric = family(name, documentation, labels=LABELS)
                for answer in live:
                    archive = _stats(answer).get("archive") or {}
                    if archive or family is CounterMetricFamily:  # ages: nodes with an archive
                        metric.add_metric(self._labels(answer), float(archive.get(key, 0)))
                yield metric

    def _labelled(self, live: list[StatsAnswer]) -> Iterator[Metric]:
        acks = CounterMetricFamily("pzq_acks", "Consumer ACKs: acked (removed) or nacked "
                                   "(given back).", labels=[*LABELS, "outcome"])
        producer = CounterMetricFamily("pzq_producer_acks", "Producer ACKs by outcome.",
                                       labels=[*LABELS, "outcome"])
        peers = GaugeMetricFamily("pzq_peer_up", "1 if the peer answers heartbeats.",
                                  labels=[*LABELS, "peer"])
        confirmed = GaugeMetricFamily("pzq_peer_restored_confirmed", "On a node restored "
                                      "from a backup: 1 if the peer keeps what it lost.",
                                      labels=[*LABELS, "peer"])
        archive = GaugeMetricFamily("pzq_archive_last_offset", "End offset of a topic's log.",
                                    labels=[*LABELS, "topic"])
        damaged = CounterMetricFamily("pzq_archive_damaged_records", "Damaged archive records "
                                      "ZPER readers met since the node started.",
                                      labels=[*LABELS, "topic"])
        forbidden = CounterMetricFamily("pzq_forbidden", "Requests refused by the "
                                        "--authorization rules, by kind (produce: messages, "
                                        "consume: CONSUMEs and --send-dsn handshakes, admin: "
                                        "monitor commands).", labels=[*LABELS, "kind"])
        for answer in live:
            stats, labels = _stats(answer), self._labels(answer)
            for outcome in ACK_OUTCOMES:
                acks.add_metric([*labels, outcome], float(stats.get(outcome, 0)))
            for outcome, count in stats.get("producer_acks", {}).items():
                producer.add_metric([*labels, outcome], float(count))
            for kind, count in stats.get("forbidden", {}).items():
                forbidden.add_metric([*labels, kind], float(count))
            for peer in stats.get("peers", []):
                peers.add_metric([*labels, peer["endpoint"]],
                                 1.0 if peer["state"] == "up" else 0.0)
                if peer.get("restored_confirmed") is not None:  # (a node never restored)
                    confirmed.add_metric([*labels, peer["endpoint"]],
                                         1.0 if peer["restored_confirmed"] else 0.0)
            for topic, info in (stats.get("archive") or {}).get("topics", {}).items():
                archive.add_metric([*labels, topic], float(info["last_offset"]))
                damaged.add_metric([*labels, topic], float(info.get("damaged_records", 0)))
        yield from (acks, producer, peers, confirmed, archive, damaged, forbidden)

    def _takeovers(self, live: list[StatsAnswer]) -> Iterator[Metric]:
        """Per origin a node takes over: the copies it holds, what is out (all groups)."""
        replicas = GaugeMetricFamily("pzq_takeover_replicas", "Copies of a down node's "
                                     "messages held by the node taking it over.",
                                     labels=[*LABELS, "origin"])
        inflight = GaugeMetricFamily("pzq_takeover_messages_inflight", "A taken-over node's "
                                     "messages out with consumers, every group together.",
                                     labels=[*LABELS, "origin"])
        for answer in live:
            for origin, taken in (_stats(answer).get("taken_over") or {}).items():
                labels = [*self._labels(answer), origin]
                replicas.add_metric(labels, float(taken["replicas"]))
                inflight.add_metric(labels, float(taken_over_inflight(taken)))
        yield from (replicas, inflight)

    def _latency(self, live: list[StatsAnswer]) -> Metric:
        latency = HistogramMetricFamily(
            "pzq_ack_latency_seconds", "Delivery to consumer ACK, every ACK since the node "
            "started.", labels=LABELS)
        for answer in live:
            histogram = _stats(answer).get("ack_latency_histogram")
            if histogram:
                # STATS keeps the bounds as sorted keys ("10" before "2.5"): the
                # exposition format wants them in increasing order
                bounds = sorted(histogram["buckets"].items(), key=lambda item: float(item[0]))
                buckets = [(bound, float(count)) for bound, count in bounds]
                buckets.append(("+Inf", float(histogram["count"])))
                latency.add_metric(self._labels(answer), buckets, histogram["sum_seconds"])
        return latency


def _stats(answer: StatsAnswer) -> dict[str, Any]:
    assert answer.stats is not None
    return answer.stats
