"""The archive as a part of the node's loop (pzq.parts), with --archive-dir.

The wake's time for the appends its ACKs make, a wake for its timed fsync
(--flush-interval), the fsync after the wake's deliveries (before the ZPER broker
says what is durable) and retention at its tick. Its readers on
--archive-dsn are pzq.archive.zper.reader_server's part.
"""

from __future__ import annotations

from typing import Protocol

from pzq.archive.tier.tier import ArchiveTier
from pzq.clock import Now, poll_ms
from pzq.parts import RETENTION, Part
from pzq.store.batch import Batch
from pzq.zmqio import Events

RETENTION_PERIOD_US = 60_000_000  # look for expired archive segments once a minute


class Archived(Protocol):
    """The archive's side of ACKs and dead letters (pzq.archive.tier.archiving)."""

    @property
    def tier(self) -> ArchiveTier: ...

    def wake_at(self, now: float) -> None: ...

    def flush(self, now: float) -> None: ...

    def apply_retention(self, now: float) -> None: ...


class ArchivePart(Part):
    def __init__(self, archiving: Archived) -> None:
        self.archiving = archiving

    def ticks(self) -> dict[bytes, int]:
        return {RETENTION: RETENTION_PERIOD_US}

    def timeout_ms(self, now: Now) -> int | None:
        wait = self.archiving.tier.flush_wait_s(now.wall_us / 1e6)
        return None if wait is None else poll_ms(wait)

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        self.archiving.wake_at(now.wall_us / 1e6)  # the time of this wake's appends

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if RETENTION in reasons:
            self.archiving.apply_retention(now.wall_us / 1e6)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        self.archiving.flush(now.wall_us / 1e6)

