"""The archive as parts of the node's loop (pzq.parts).

``ArchivePart`` (--archive-dir): the wake's time for the appends its ACKs make, a wake
for its timed fsync (--flush-interval), the fsync after the wake's deliveries (before
the ZPER broker says what is durable) and retention at the scheduler's tick.
``ArchiveReaders`` (--archive-dsn, a plug-in endpoint): ZPER readers' OFFSET and
FETCH, answered last.
"""

from __future__ import annotations

from typing import Protocol

import zmq

from pzq.archive.tier import ArchiveTier
from pzq.archive.wiring import ArchiveWiring
from pzq.clock import Now, poll_ms
from pzq.endpoints import Endpoint, PlugIn
from pzq.parts import RETENTION, Part
from pzq.store.store import Batch
from pzq.zmqio import POLLIN, Events, Socket

RETENTION_PERIOD_US = 60_000_000  # look for expired archive segments once a minute


class Archived(Protocol):
    """The archive's side of ACKs and dead letters (pzq.archive.archiving)."""

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


class ArchiveReaders(Part):
    def __init__(self, tier: ArchiveTier, socket: Socket) -> None:
        self.tier = tier
        self.socket = socket

    def bound(self) -> list[Socket]:
        return [self.socket]

    def polled(self) -> list[Socket | int]:
        return [self.socket]

    def answer(self, events: Events, now: Now) -> None:
        if events.get(self.socket, 0) & POLLIN:
            self.tier.answer_readers(self.socket)

    def close(self) -> None:
        self.socket.close()


def open_readers(wiring: ArchiveWiring, dsn: str) -> Part:
    return ArchiveReaders(wiring.archive, wiring.bind(zmq.ROUTER, dsn, ARCHIVE_DSN.flag))


ARCHIVE_DSN = Endpoint("archive", "archive_dsn", "archive: endpoint of the ZPER-compatible "
                       "reader (off when unset)", needs=("archive_dir",))
ARCHIVE_READERS = PlugIn(ARCHIVE_DSN, open_readers)
