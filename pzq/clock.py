"""The time of one wake, read once and passed to every part (tests pass their own)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Now(NamedTuple):
    wall_us: int  # µs since the epoch: on the wire, in records, ack deadlines
    mono: float  # monotonic seconds: liveness, replication deadlines, rates

    @classmethod
    def read(cls) -> Now:
        # made as the tuple it is, without a call of __new__ or __init__ (a wake reads
        # the time twice: before its poll and after)
        return _NEW_TUPLE(cls, (time.time_ns() // 1000, time.monotonic()))


_NEW_TUPLE = tuple.__new__


def wall_us() -> int:
    """µs since the epoch, now: what a part reads again after it read a socket, so that
    a time it counts from (a DELAY's, a NACK's delay) is no sooner than what it read
    came (the wake's ``Now`` is read before the poll and the ticks; tests pass their own
    clock instead)."""
    return time.time_ns() // 1000


def poll_ms(wait_s: float) -> int:
    """A wait in seconds as the poll's timeout: whole milliseconds, rounded up (the
    deadline is never missed by a wake that comes a fraction early)."""
    return math.ceil(wait_s * 1000)


def utc_time(wall_us: int) -> datetime:
    """µs since the epoch as a UTC time, to the µs: ``fromtimestamp(us / 1e6)`` goes
    through a float, which rounds the last µs of 9999 (a NOT-BEFORE the node takes) up
    to the year 10000 and fails."""
    return EPOCH + timedelta(microseconds=wall_us)
