"""An insertion-ordered table of delivery entries that keeps their total size."""

from __future__ import annotations

from collections import OrderedDict
from itertools import repeat
from operator import attrgetter
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    seq: int
    value: bytes  # its size is this record's length (read without a call per entry)


E = TypeVar("E", bound=Sized)
H = TypeVar("H")  # what a table holds for a seq
VALUE = attrgetter("value")


class SeqTable(Generic[H]):
    """Entries by seq in the order they came, and the looks every table answers."""

    def __init__(self) -> None:
        self._entries: OrderedDict[int, H] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, seq: int) -> bool:
        return seq in self._entries

    def among(self, seqs: list[int]) -> set[int]:
        """Those of ``seqs`` the table holds (no call per seq)."""
        entries = self._entries
        return {seq for seq in seqs if seq in entries} if entries else set()

    def seqs(self) -> list[int]:
        return list(self._entries)


class OrderedEntries(SeqTable[E]):
    """O(1) add at the end, removal by seq, and pop of the oldest; ``bytes`` kept."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def entries(self) -> list[E]:
        return list(self._entries.values())

    def lowest(self) -> E | None:
        """The entry of the lowest seq (a walk of the table: for figures, not per message)."""
        return min(self._entries.values(), key=lambda entry: entry.seq, default=None)

    def get(self, seq: int) -> E | None:
        return self._entries.get(seq)

    def get_all(self, seqs: list[int]) -> list[E | None]:
        """``get`` of each seq, the table walked in C."""
        return list(map(self._entries.get, seqs))

    def _append(self, entry: E) -> None:
        self._entries[entry.seq] = entry
        self.bytes += len(entry.value)

    def _first(self) -> E | None:
        return next(iter(self._entries.values()), None)

    def _pop_first(self) -> E:
        _, entry = self._entries.popitem(last=False)
        self.bytes -= len(entry.value)
        return entry

    def _remove(self, seq: int) -> E | None:
        entry = self._entries.pop(seq, None)
        if entry is not None:
            self.bytes -= len(entry.value)
        return entry

    def _remove_all(self, seqs: list[int]) -> tuple[list[E], list[int]]:
        """``_remove`` of each seq, the table walked in C: the entries removed, and the
        seqs it did not hold (a seq given twice is held once)."""
        found = list(map(self._entries.pop, seqs, repeat(None)))
        removed = [entry for entry in found if entry is not None]
        self.bytes -= sum(map(len, map(VALUE, removed)))
        missing = ([] if len(removed) == len(seqs)
                   else [seq for seq, entry in zip(seqs, found, strict=True) if entry is None])
        return removed, missing

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
