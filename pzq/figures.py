"""The node's figures for MONITOR and STATS, all from counters kept as work happens."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pzq import __version__
from pzq.cluster import NO_CLUSTER

if TYPE_CHECKING:
    from pzq.device import Device


def node_figures(device: "Device") -> dict[str, object]:
    monotonic = time.monotonic()
    store, counters = device.store, device.counters
    inflight, ready = device.delivery.inflight, device.delivery.ready
    return {
        # The original pzq's MONITOR keys
        "messages": store.messages,
        "messages_inflight": len(inflight),
        "db_size": store.bytes,
        "inflight_db_size": inflight.bytes,
        "syncs": store.syncs,
        "expired_messages": counters.expired,
        # and ours
        "messages_ready": len(ready),
        "ready_size": ready.bytes,
        "dead_letters": store.dead_letters,
        "pending_producer_acks": len(device.outbox),
        "consumers_connected": device.consumers_connected,
        "version": __version__,
        "node_id": store.node_id.decode(),
        "uptime_seconds": round(monotonic - device.started, 3),
        "hard_sync": int(device.config.hard_sync),
        **counters.as_dict(),
        "rates": device.rates.rates(monotonic, counters),
        "ack_latency_ms": device.ack_latency.percentiles_ms(monotonic),
        "ack_latency_histogram": device.ack_latency.histogram.snapshot(),
        "producer_acks": {"ok": counters.acks_ok, "failed": counters.acks_failed,
                          "replication_failed": counters.acks_replication_failed},
        **(device.cluster.snapshot(monotonic) if device.cluster else NO_CLUSTER),
        "archive": device.archive.snapshot() if device.archive else {},
    }
