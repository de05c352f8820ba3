"""The scheduler: APScheduler interval jobs that only wake the loop.

The reaper tick tells the loop to collect expired deliveries; the heartbeat tick
(cluster only) tells it to ping its peers. Neither touches a socket or a table:
the loop owns those.
"""

from __future__ import annotations

from apscheduler.schedulers.background import BackgroundScheduler

from pzq.node.config import Config
from pzq.node.waker import HEARTBEAT, REAP, RELAY_POLL, RETENTION, Waker

RETENTION_PERIOD_US = 60_000_000  # look for expired archive segments once a minute


def start_scheduler(waker: Waker, ticks: dict[bytes, int]) -> BackgroundScheduler:
    """One interval job per wake-up reason, ``ticks`` maps reason -> period in µs."""
    scheduler = BackgroundScheduler(daemon=True)
    for reason, period_us in ticks.items():
        scheduler.add_job(waker.wake, "interval", args=[reason], seconds=period_us / 1_000_000,
                          id=reason.decode(), coalesce=True, max_instances=1)
    scheduler.start()
    return scheduler


def ticks(config: Config) -> dict[bytes, int]:
    """The wake-ups a node needs, each with its period in µs."""
    periods = {REAP: config.reaper_frequency}
    if config.archive_dir is not None:
        periods[RETENTION] = RETENTION_PERIOD_US
    if config.zper_relay_dsn is not None:
        periods[RELAY_POLL] = config.relay_poll * 1000
    if config.broadcast_dsn is not None:
        periods[HEARTBEAT] = heartbeat_period_us(config.timeout_nodes)
    return periods


def heartbeat_period_us(timeout_nodes_us: int) -> int:
    """Several heartbeats per --timeout-nodes, at least one a second, at most 100 a second."""
    return max(10_000, min(1_000_000, timeout_nodes_us // 4))
