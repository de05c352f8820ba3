"""Prometheus exporter and status page for pzq nodes.

    python -m monitoring.exporter --dsn tcp://127.0.0.1:11133 [--dsn ...] [--listen 127.0.0.1:9646]

``/metrics`` polls each node's STATS at scrape time (a node that does not answer is
``pzq_up 0``, never an error); ``/api/stats`` gives the same answers as JSON; ``/``
is a status page that polls ``/api/stats`` and draws the last minutes.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from pzq.monitor_client import fetch_stats

PAGE = Path(__file__).with_name("status.html")

# (metric, STATS key, help) of plain gauges and counters
GAUGES = (
    ("pzq_messages_stored", "messages", "Messages stored and not yet acked."),
    ("pzq_messages_inflight", "messages_inflight", "Deliveries awaiting a consumer ACK."),
    ("pzq_messages_ready", "messages_ready", "Messages waiting to be delivered again."),
    ("pzq_dead_letters", "dead_letters", "Messages in the dead letters."),
    ("pzq_stored_bytes", "db_size", "Bytes of stored messages."),
    ("pzq_inflight_bytes", "inflight_db_size", "Bytes of messages in flight."),
    ("pzq_consumers_connected", "consumers_connected", "Consumer connections."),
    ("pzq_pending_producer_acks", "pending_producer_acks", "Producer ACKs waiting for room."),
    ("pzq_replicas_held", "replicas_held", "Copies of other nodes' messages held here."),
    ("pzq_uptime_seconds", "uptime_seconds", "Seconds since the node started."),
)
COUNTERS = (
    ("pzq_received", "received", "Producer messages received."),
    ("pzq_delivered", "delivered", "Deliveries sent, first ones and again."),
    ("pzq_redelivered", "redelivered", "Deliveries of messages delivered before."),
    ("pzq_store_batches", "syncs", "Store batches written."),
    ("pzq_store_failures", "store_failures", "Producer messages refused by a failed write."),
    ("pzq_replication_failures", "replication_failures", "ACKs sent with REPLICATION_FAILED."),
    ("pzq_cluster_rejected", "cluster_rejected", "Cluster frames refused from strangers."),
)
OUTCOMES = ("acked", "nacked", "expired", "evicted", "dead_lettered")


class PzqCollector:
    """Asks every node at scrape time, so the figures are never stale."""

    def __init__(self, dsns: Sequence[str], timeout: float) -> None:
        self.dsns = list(dsns)
        self.timeout = timeout

    def stats(self) -> dict[str, dict[str, Any] | None]:
        return {dsn: fetch_stats(dsn, self.timeout).stats for dsn in self.dsns}

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        answers = self.stats()
        up = GaugeMetricFamily("pzq_up", "1 if the node answered STATS.", labels=["node"])
        for dsn, stats in answers.items():
            up.add_metric([dsn], 1 if stats else 0)
        yield up
        live = {dsn: stats for dsn, stats in answers.items() if stats}
        yield from self._simple(live)
        yield from self._labelled(live)

    def _simple(self, live: dict[str, dict[str, Any]]) -> Iterator[Any]:
        for family, table in ((GaugeMetricFamily, GAUGES), (CounterMetricFamily, COUNTERS)):
            for name, key, documentation in table:
                metric = family(name, documentation, labels=["node"])
                for dsn, stats in live.items():
                    metric.add_metric([dsn], float(stats.get(key, 0)))
                yield metric

    def _labelled(self, live: dict[str, dict[str, Any]]) -> Iterator[Any]:
        acks = CounterMetricFamily("pzq_acks", "Deliveries by how they ended.",
                                   labels=["node", "outcome"])
        producer = CounterMetricFamily("pzq_producer_acks", "Producer ACKs by outcome.",
                                       labels=["node", "outcome"])
        latency = GaugeMetricFamily("pzq_ack_latency_seconds",
                                    "Delivery to consumer ACK over the last minute.",
                                    labels=["node", "quantile"])
        peers = GaugeMetricFamily("pzq_peer_up", "1 if the peer answers heartbeats.",
                                  labels=["node", "peer"])
        archive = GaugeMetricFamily("pzq_archive_last_offset", "End offset of a topic's log.",
                                    labels=["node", "topic"])
        for dsn, stats in live.items():
            for outcome in OUTCOMES:
                acks.add_metric([dsn, outcome], float(stats.get(outcome, 0)))
            for outcome, count in stats.get("producer_acks", {}).items():
                producer.add_metric([dsn, outcome], float(count))
            for quantile, key in (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99")):
                value = stats.get("ack_latency_ms", {}).get(key, 0.0)
                latency.add_metric([dsn, quantile], value / 1000)
            for peer in stats.get("peers", []):
                peers.add_metric([dsn, peer["endpoint"]], 1.0 if peer["state"] == "up" else 0.0)
            for topic, info in stats.get("archive", {}).get("topics", {}).items():
                archive.add_metric([dsn, topic], float(info["last_offset"]))
        yield from (acks, producer, latency, peers, archive)


def make_handler(collector: PzqCollector, registry: CollectorRegistry) -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            if self.path == "/metrics":
                self._reply(200, CONTENT_TYPE_LATEST, generate_latest(registry))
            elif self.path == "/api/stats":
                self._reply(200, "application/json", json.dumps(collector.stats()).encode())
            elif self.path in ("/", "/index.html"):
                self._reply(200, "text/html; charset=utf-8", PAGE.read_bytes())
            else:
                self._reply(404, "text/plain", b"not found\n")

        def _reply(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape is noise

    return Handler


def serve(dsns: Sequence[str], host: str, port: int, timeout: float) -> ThreadingHTTPServer:
    """Start serving in a background thread; returns the server (``.server_port``)."""
    collector = PzqCollector(dsns, timeout)
    registry = CollectorRegistry()
    registry.register(collector)
    server = ThreadingHTTPServer((host, port), make_handler(collector, registry))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pzq-exporter", description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", action="append", required=True,
                        help="a node's --monitor-dsn (repeatable)")
    parser.add_argument("--listen", default="127.0.0.1:9646", help="HOST:PORT to serve on")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait per node")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = serve(args.dsn, host or "127.0.0.1", int(port), args.timeout)
    print(f"serving http://{host}:{server.server_port}/ for {', '.join(args.dsn)}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
