"""Messages ready to be delivered again, served before new ones, in give-back order.

Entries keep the stored record, so a redelivery needs no store read. What is here
was in flight a moment ago, and new messages are only sent while this queue is
empty, so together with the in-flight table it stays near --inflight-size bytes.
An ordered dict gives O(1) push, pop of the oldest, and removal by a late ACK.
"""

from __future__ import annotations

from collections import OrderedDict

from pzq.inflight import InFlight


class RedeliveryQueue:
    def __init__(self) -> None:
        self.bytes = 0
        self._entries: OrderedDict[int, InFlight] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, seq: int) -> bool:
        return seq in self._entries

    def push(self, entry: InFlight) -> None:
        self._entries[entry.seq] = entry
        self.bytes += entry.size

    def push_front(self, entry: InFlight) -> None:
        """Put back an entry that could not be sent after all, keeping its turn."""
        self.push(entry)
        self._entries.move_to_end(entry.seq, last=False)

    def pop(self) -> InFlight:
        _, entry = self._entries.popitem(last=False)
        self.bytes -= entry.size
        return entry

    def remove(self, seq: int) -> InFlight | None:
        entry = self._entries.pop(seq, None)
        if entry is not None:
            self.bytes -= entry.size
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
