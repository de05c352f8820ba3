"""The parts' periodic wake-ups (pzq.parts ``ticks``: the reaper, the cluster's
heartbeats, archive retention, the ZPER relay's poll): APScheduler interval jobs, run
in the loop's own thread.

One interval job per reason (``coalesce``: missed runs run once, on the trigger's grid
from the start; ``max_instances`` 1). ``LoopScheduler`` keeps no thread, as
APScheduler's own loop schedulers (asyncio, Tornado, Qt, gevent) keep none: it only
records when it must next be woken (``_start_timer``: a monotonic deadline, from the
wait ``_process_jobs`` returns); the loop's poll waits at most until then, and the
wake in which it is due calls ``wakeup``, which runs the due jobs inline
(``DebugExecutor``: in the calling thread) and sets the next deadline. A job only adds
its reason to the wake's; the parts do the work, on the loop's thread that owns every
socket and table. Why not a ``BackgroundScheduler``: its thread and its pool's worker
cost each tick two thread wakes and the hand-over through the waker's pipe for the same
wake of the loop, and under load each hand-over fought the busy loop for the
interpreter's lock, which put the slowest messages on the ticks.
"""

from __future__ import annotations

import math
import time
from datetime import UTC

from apscheduler.executors.debug import DebugExecutor
from apscheduler.schedulers.base import BaseScheduler


class LoopScheduler(BaseScheduler):  # type: ignore[misc]  # (apscheduler has no types)
    """``periods_us``: reason -> period in µs (a period of 0: no job). The jobs' grids
    begin here; ``start`` sets the first deadline."""

    def __init__(self, periods_us: dict[bytes, int]) -> None:
        super().__init__(timezone=UTC, executors={"default": DebugExecutor()},
                         job_defaults={"coalesce": True, "max_instances": 1,
                                       "misfire_grace_time": None})  # late: still once
        self.soonest = math.inf  # monotonic seconds: when ``due`` has jobs to run
        self._reasons = bytearray()  # of the jobs run since ``due`` last handed them
        for reason, period_us in periods_us.items():
            if period_us > 0:
                self.add_job(self._note, "interval", args=[reason], id=reason.decode(),
                             seconds=period_us / 1_000_000)

    def _note(self, reason: bytes) -> None:
        self._reasons += reason

    def timeout_ms(self, mono: float, timeout: int | None) -> int | None:
        """``timeout`` (the parts' wait, None: none) shortened to the next deadline."""
        if self.soonest == math.inf:
            return timeout
        wait = math.ceil(max(0.0, self.soonest - mono) * 1000)  # (poll_ms, without its call)
        return wait if timeout is None or wait < timeout else timeout

    def due(self) -> bytes:
        """Runs the jobs due (the loop asks once its time reached ``soonest``): their
        reasons (b"": none; a reason once however many of its runs were missed)."""
        self.wakeup()
        reasons = bytes(self._reasons)
        self._reasons.clear()
        return reasons

    # -- BaseScheduler's timer, kept by the loop ----------------------------------

    def shutdown(self, wait: bool = True) -> None:
        super().shutdown(wait)
        self._stop_timer()

    def wakeup(self) -> None:
        self._stop_timer()
        self._start_timer(self._process_jobs())

    def _start_timer(self, wait_seconds: float | None) -> None:
        self.soonest = math.inf if wait_seconds is None else time.monotonic() + wait_seconds

    def _stop_timer(self) -> None:
        self.soonest = math.inf
