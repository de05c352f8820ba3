"""The scheduler: APScheduler interval jobs that only wake the loop.

Each part of the loop names the wake-ups it needs (pzq.parts ``ticks``): the reaper,
the cluster's heartbeats, archive retention, the ZPER relay's poll. A job only
writes its reason to the waker: the loop owns every socket and table.
"""

from __future__ import annotations

from apscheduler.schedulers.background import BackgroundScheduler

from pzq.node.waker import Waker


def start_scheduler(waker: Waker, ticks: dict[bytes, int]) -> BackgroundScheduler:
    """One interval job per wake-up reason, ``ticks`` maps reason -> period in µs."""
    scheduler = BackgroundScheduler(daemon=True)
    for reason, period_us in ticks.items():
        scheduler.add_job(waker.wake, "interval", args=[reason], seconds=period_us / 1_000_000,
                          id=reason.decode(), coalesce=True, max_instances=1)
    scheduler.start()
    return scheduler
