"""The parts' periodic wake-ups (pzq.parts ``ticks``: the reaper, the cluster's
heartbeats, archive retention, the ZPER relay's poll), kept by the loop itself.

Each reason is due on a grid of its period from the loop's start; the poll waits at
most until the soonest is due, and the wake in which it is due hands it to the
parts. Missed ones (a long wake) come once, and the grid holds. A thread with a
timer would cost each tick two thread wakes and the hand-over through the waker's
pipe, for the same wake of the loop.
"""

from __future__ import annotations

import math

from pzq.clock import poll_ms


class Ticks:
    def __init__(self, periods_us: dict[bytes, int], mono: float) -> None:
        self._periods = {reason: period_us / 1_000_000
                         for reason, period_us in periods_us.items() if period_us > 0}
        self._next = {reason: mono + period for reason, period in self._periods.items()}
        self.soonest = min(self._next.values(), default=math.inf)  # monotonic seconds

    def timeout_ms(self, mono: float, timeout: int | None) -> int | None:
        """``timeout`` (the parts' wait, None: none) shortened to the soonest tick."""
        if self.soonest == math.inf:
            return timeout
        wait = poll_ms(max(0.0, self.soonest - mono))
        return wait if timeout is None or wait < timeout else timeout

    def due(self, mono: float) -> bytes:
        """The reasons due at ``mono`` (b"": none), each moved to its next time on its
        grid after ``mono``. The loop asks only once ``mono`` reached ``soonest``."""
        reasons = b""
        for reason, at in self._next.items():
            if at <= mono:
                reasons += reason
                period = self._periods[reason]
                self._next[reason] = at + period * (math.floor((mono - at) / period) + 1)
        self.soonest = min(self._next.values(), default=math.inf)
        return reasons
