"""Given-back deliveries that wait before they may go again: a group's redelivery
backoff after an expired deadline, or a consumer's NACK with a delay.

A heap orders them by when they are due; the entries themselves sit in the ordered
table (so a late ACK removes one in O(1), and ``bytes`` is kept), and the heap drops
the seqs that left before they were due as it meets them.

Each wait is kept in the store too (``waits``: pzq.delivery.waits), a key while the
entry is here: put as it comes in, deleted as it leaves, whichever way it leaves.
"""

from __future__ import annotations

import heapq

from pzq.delivery.entries import OrderedEntries
from pzq.delivery.inflight import InFlight
from pzq.delivery.waits import NO_WAITS, Waits
from pzq.store.batch import Batch


class DelayedDeliveries(OrderedEntries[InFlight]):
    def __init__(self, waits: Waits = NO_WAITS) -> None:
        super().__init__()
        self._due: list[tuple[int, int]] = []  # (due µs, seq), the soonest first
        self._due_at: dict[int, int] = {}  # seq -> when it is due (heap items may be stale)
        self.waits = waits

    def push(self, entry: InFlight, due_us: int, batch: Batch | None = None) -> None:
        """Wait until ``due_us``; its wait kept in ``batch`` (else in the next one)."""
        self.restore(entry, due_us)
        self.waits.keep(entry.seq, due_us, batch)

    def restore(self, entry: InFlight, due_us: int) -> None:
        """Wait until ``due_us``, its wait in the store already (a restart's)."""
        self._append(entry)
        self._due_at[entry.seq] = due_us
        heapq.heappush(self._due, (due_us, entry.seq))

    def take_due(self, now_us: int) -> list[InFlight]:
        """The entries due by ``now_us``, soonest first, out of the table."""
        due = []
        while self._due and self._due[0][0] <= now_us:
            due_us, seq = heapq.heappop(self._due)
            if self._due_at.get(seq) == due_us:  # else it left (or came again) since
                due.append(self.remove(seq))
        return [entry for entry in due if entry is not None]

    def next_due_us(self) -> int | None:
        while self._due and self._due_at.get(self._due[0][1]) != self._due[0][0]:
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else None

    def remove(self, seq: int, batch: Batch | None = None) -> InFlight | None:
        """Out of the table, its wait's key deleted in ``batch`` (else the next one)."""
        self._due_at.pop(seq, None)
        entry = self._remove(seq)
        if entry is not None:
            self.waits.end(seq, batch)
        return entry

    def clear(self) -> None:
        self.waits.end_all(list(self._due_at))
        super().clear()
        self._due.clear()
        self._due_at.clear()
