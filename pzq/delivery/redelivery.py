"""Messages ready to be delivered again, served before new ones, in give-back order.

Entries keep the stored record, so a redelivery needs no store read. What is here
was in flight a moment ago, and new messages are only sent while this queue is
empty, so together with the in-flight table it stays near --inflight-size bytes.
An ordered dict gives O(1) push, pop of the oldest, and removal by a late ACK.
"""

from __future__ import annotations

from pzq.delivery.entries import OrderedEntries
from pzq.delivery.inflight import InFlight


class RedeliveryQueue(OrderedEntries[InFlight]):
    def push(self, entry: InFlight) -> None:
        self._append(entry)

    def push_front(self, entry: InFlight) -> None:
        """Put back an entry that could not be sent after all, keeping its turn."""
        self._append(entry)
        self._entries.move_to_end(entry.seq, last=False)

    def pop(self) -> InFlight:
        return self._pop_first()

    def remove(self, seq: int) -> InFlight | None:
        return self._remove(seq)
