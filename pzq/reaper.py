"""The reaper: an APScheduler interval job that tells the loop to collect expired
deliveries. It only signals; the loop owns the sockets and the in-flight table."""

from __future__ import annotations

from apscheduler.schedulers.background import BackgroundScheduler

from pzq.waker import REAP, Waker


def start_reaper(waker: Waker, frequency_us: int) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(daemon=True)
    scheduler.add_job(waker.wake, "interval", args=[REAP], seconds=frequency_us / 1_000_000,
                      id="reaper", coalesce=True, max_instances=1)
    scheduler.start()
    return scheduler
