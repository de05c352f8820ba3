"""Deliveries awaiting a consumer ACK, bounded in bytes, oldest first.

Every delivery gets the same ack timeout, so send order is deadline order: one
insertion-ordered dict serves both the reaper (expired entries are at the front)
and the LRU bound (the least recently sent entry is at the front too).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


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


class InFlightTable:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[int, InFlight] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, seq: int) -> bool:
        return seq in self._entries

    def oldest(self) -> InFlight | None:
        for entry in self._entries.values():
            return entry
        return None

    def add(self, entry: InFlight) -> list[InFlight]:
        """Track a delivery; returns the entries evicted to stay within max_bytes.

        The new entry itself is never evicted, even when it alone is larger.
        """
        self._entries[entry.seq] = entry
        self.bytes += entry.size
        evicted = []
        while self.bytes > self.max_bytes and len(self._entries) > 1:
            evicted.append(self._pop_oldest())
        return evicted

    def pop(self, seq: int) -> InFlight | None:
        entry = self._entries.pop(seq, None)
        if entry is not None:
            self.bytes -= entry.size
        return entry

    def expire(self, now_us: int) -> list[InFlight]:
        """Remove and return every entry whose deadline has passed."""
        expired = []
        while self._entries:
            entry = next(iter(self._entries.values()))
            if entry.deadline_us > now_us:
                break
            expired.append(self._pop_oldest())
        return expired

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _pop_oldest(self) -> InFlight:
        _, entry = self._entries.popitem(last=False)
        self.bytes -= entry.size
        return entry
