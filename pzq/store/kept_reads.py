"""What was made of a topic's reads, kept for its other groups: a group that reads
the same stretch of the log gets the same lists (pzq.store.log_blocks), and takes what
the first made of them (its records, pzq.delivery.groups; its batch entries,
pzq.serving.sending) by the list, not a look-up a message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

KEPT_READS = 64  # reads kept
KEPT_SEQS = 4096  # their seqs, in all
KEPT_RECORD_BYTES = 4096  # a read with a longer record is not kept
T = TypeVar("T")


class KeptReads(Generic[T]):
    """What was made of reads (their records, their entries) by the read's list of seqs
    (the log's own, the same object for each group reading that stretch while it is
    unchanged: pzq.store.log_blocks), each kept with its list (an id is not reused while
    it lives). At most KEPT_READS reads and KEPT_SEQS seqs, the oldest let go
    first, and none with a record longer than KEPT_RECORD_BYTES: what is kept stays
    within what the recent records keep (pzq.delivery.recent)."""

    __slots__ = ("_reads", "_seqs")

    def __init__(self) -> None:
        self._reads: dict[int, tuple[list[int], T]] = {}
        self._seqs = 0  # of the reads kept

    def get(self, seqs: list[int]) -> T | None:
        read = self._reads.get(id(seqs))
        return read[1] if read is not None and read[0] is seqs else None

    def keep(self, seqs: list[int], records: Sequence[bytes | None], made: T) -> None:
        reads = self._reads
        if len(seqs) > KEPT_SEQS or (
                records and max(map(len, filter(None, records)), default=0)
                > KEPT_RECORD_BYTES):
            return
        while reads and (len(reads) >= KEPT_READS
                         or self._seqs + len(seqs) > KEPT_SEQS):
            self._seqs -= len(reads.pop(next(iter(reads)))[0])  # (the oldest)
        reads[id(seqs)] = (seqs, made)
        self._seqs += len(seqs)

    def clear(self) -> None:
        self._reads.clear()
        self._seqs = 0
