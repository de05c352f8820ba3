"""Deliveries awaiting a consumer ACK, bounded in bytes, oldest first.

Every delivery gets the same ack timeout, so send order is deadline order: one
insertion-ordered dict serves both the reaper (expired entries are at the front)
and the LRU bound (the least recently sent entry is at the front too).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from pzq.delivery.entries import OrderedEntries


@dataclass(slots=True)
class InFlight:
    seq: int
    value: bytes  # the stored record, so a give-back needs no store read
    sent_us: int
    deadline_us: int
    deliveries: int
    first_delivered_us: int

    @property
    def size(self) -> int:
        return len(self.value)


SEQ = attrgetter("seq")
NONE_EVICTED: list[InFlight] = []  # (never changed: no list made per delivery)


class InFlightTable(OrderedEntries[InFlight]):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def oldest(self) -> InFlight | None:
        return self._first()

    def add(self, entry: InFlight) -> list[InFlight]:
        """Track a delivery; returns the entries evicted to stay within max_bytes.

        The new entry itself is never evicted, even when it alone is larger.
        """
        self._append(entry)
        if self.bytes <= self.max_bytes:
            return NONE_EVICTED
        evicted = []
        while self.bytes > self.max_bytes and len(self) > 1:
            evicted.append(self._pop_first())
        return evicted

    def add_run(self, entries: list[InFlight], size: int) -> None:
        """Track deliveries newer than any in the table, whose records are ``size``
        bytes together, known to fit within max_bytes (nothing is evicted)."""
        self._entries.update(zip(map(SEQ, entries), entries, strict=True))
        self.bytes += size

    # (the same function, no call in between: one for every ACK)
    pop = OrderedEntries._remove
    pop_all = OrderedEntries._remove_all

    def expire(self, now_us: int) -> list[InFlight]:
        """Remove and return every entry whose deadline has passed."""
        expired = []
        while (oldest := self._first()) is not None and oldest.deadline_us <= now_us:
            expired.append(self._pop_first())
        return expired
