"""The time of one wake, read once and passed to every part (tests pass their own)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Now:
    wall_us: int  # µs since the epoch: on the wire, in records, ack deadlines
    mono: float  # monotonic seconds: liveness, replication deadlines, rates

    @classmethod
    def read(cls) -> Now:
        return cls(time.time_ns() // 1000, time.monotonic())


def poll_ms(wait_s: float) -> int:
    """A wait in seconds as the poll's timeout: whole milliseconds, rounded up (the
    deadline is never missed by a wake that comes a fraction early)."""
    return math.ceil(wait_s * 1000)
