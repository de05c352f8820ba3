"""The archive as a part of the node's loop (pzq.parts): the wake's time for the
appends its ACKs make, a wake for its timed fsync
(--flush-interval), the fsync after the wake's deliveries (before the ZPER broker
says what is durable), retention at the scheduler's tick, and ZPER readers'
requests (--archive-dsn) answered last.
"""

from __future__ import annotations

import math

from pzq.archive.archiving import Archiving
from pzq.clock import Now
from pzq.parts import RETENTION, Part
from pzq.store.store import Batch
from pzq.zmqio import POLLIN, Events, Socket


class ArchivePart(Part):
    def __init__(self, archiving: Archiving, readers: Socket | None) -> None:
        self.archiving = archiving
        self.readers = readers

    def timeout_ms(self, now: Now) -> int | None:
        wait = self.archiving.tier.flush_wait_s(now.wall_us / 1e6)
        return None if wait is None else math.ceil(wait * 1000)

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        self.archiving.wake_at(now.wall_us / 1e6)  # the time of this wake's appends

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if RETENTION in reasons:
            self.archiving.apply_retention(now.wall_us / 1e6)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        self.archiving.flush(now.wall_us / 1e6)

    def answer(self, events: Events, now: Now) -> None:
        if self.readers is not None and events.get(self.readers, 0) & POLLIN:
            self.archiving.tier.answer_readers(self.readers)
