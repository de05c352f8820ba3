"""What was made of a topic's reads, kept for its other groups: a group that reads
the same stretch of the log gets the same lists (pzq.store.log_blocks), and takes what
the first made of them (its records, pzq.delivery.groups; its batch entries,
pzq.serving.sending) by the list, not a look-up a message."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import sub
from typing import Generic, TypeVar

KEPT_READS = 64  # reads kept
KEPT_SEQS = 4096  # their seqs, in all
KEPT_RECORD_BYTES = 4096  # a read with a longer record is not kept
T = TypeVar("T")
E = TypeVar("E")


class KeptReads(Generic[T]):
    """What was made of reads (their records, their entries) by the read's list of seqs
    (the log's own, the same object for each group reading that stretch while it is
    unchanged: pzq.store.log_blocks), each kept with its list (an id is not reused while
    it lives). At most KEPT_READS reads and KEPT_SEQS seqs, the oldest let go
    first, and none with a record longer than KEPT_RECORD_BYTES: what is kept stays
    within KEPT_SEQS times that (16 MiB) whatever the messages."""

    __slots__ = ("_reads", "_seqs", "_highest")

    def __init__(self) -> None:
        self._reads: dict[int, tuple[list[int], T]] = {}
        self._seqs = 0  # of the reads kept
        self._highest = -1  # no seq above it kept (the newest read's first is past it)

    def get(self, seqs: list[int]) -> T | None:
        read = self._reads.get(id(seqs))
        return read[1] if read is not None and read[0] is seqs else None

    def keep(self, seqs: list[int], records: Sequence[bytes | None], made: T,
             longest: int | None = None) -> None:
        """``longest``: the longest of ``records``, where the caller measured them."""
        reads = self._reads
        if longest is None and records:
            longest = max(map(len, filter(None, records)), default=0)
        if len(seqs) > KEPT_SEQS or (longest or 0) > KEPT_RECORD_BYTES:
            return
        while reads and (len(reads) >= KEPT_READS
                         or self._seqs + len(seqs) > KEPT_SEQS):
            self._seqs -= len(reads.pop(next(iter(reads)))[0])  # (the oldest)
        reads[id(seqs)] = (seqs, made)
        self._seqs += len(seqs)
        if seqs and seqs[-1] > self._highest:
            self._highest = seqs[-1]

    def run_from(self, first: int, count: int, made_of: Callable[[T], Sequence[E] | None]
                 ) -> list[E]:
        """What the kept runs made of the seqs from ``first`` on (at most ``count``), as
        far as they reach with no seq missing: a run is a read whose seqs are
        ascending, each once and none left out, so a seq's place in it is its distance
        from the first. ``made_of``: a kept read's list, one for each of its seqs (None:
        not one to take from). A look at each kept read, not at each seq: another group
        whose read of the same messages is not the same list (it starts elsewhere, or
        reads more) takes what the first made where its reads overlap. A read past
        every kept one (the first group's, of new messages) is told at once, with no
        look at the kept reads."""
        found: list[E] = []
        if first > self._highest:  # (a read of new messages, the first group's: at once)
            return found
        seq, end = first, first + count
        while seq < end:
            # the newest first: the other groups' reads of the same stretch were
            # kept last (a group behind the others looks a little further)
            for seqs, made in reversed(self._reads.values()):
                if not seqs or not seqs[0] <= seq <= seqs[-1] \
                        or seqs[-1] - seqs[0] != len(seqs) - 1:
                    continue
                each = made_of(made)
                if each is not None:
                    taken = each[seq - seqs[0]:end - seqs[0]]
                    found += taken
                    seq += len(taken)
                    break
            else:
                break
        return found

    def each_of(self, seqs: list[int], made_of: Callable[[T], Sequence[E | None]]
                ) -> list[E | None]:
        """What the kept reads made of each of ``seqs`` (ascending, each once; None:
        kept nowhere), for a read that is not a kept list (a filtered group's, one
        starting elsewhere in a stretch read before): a look at each kept read that
        reaches them, a seq's place in it by its distance from the first (a run) or by
        bisection. A read past every kept one (the first group's, of new messages) is
        told at once."""
        found: list[E | None] = [None] * len(seqs)
        if not seqs or seqs[0] > self._highest:
            return found
        missing, lowest, highest = len(seqs), seqs[0], seqs[-1]
        for kept, made in reversed(self._reads.values()):  # (the newest first)
            if not kept or kept[0] > highest or kept[-1] < lowest:
                continue
            low, high = bisect_left(seqs, kept[0]), bisect_right(seqs, kept[-1])
            if low == high:
                continue
            each, first = made_of(made), kept[0]
            if kept[-1] - first == len(kept) - 1 and found[low:high].count(None) == high - low:
                # a run, none of these found yet: their places taken in C
                if seqs[high - 1] - seqs[low] == high - 1 - low:  # (a run of them too)
                    found[low:high] = each[seqs[low] - first:seqs[high - 1] - first + 1]
                else:
                    found[low:high] = map(each.__getitem__,
                                          map(sub, seqs[low:high], repeat(first)))
                missing -= high - low
            else:
                missing -= _bisected(found, seqs, low, high, kept, each)
            if missing <= 0:
                break
        return found

    def clear(self) -> None:
        self._reads.clear()
        self._seqs = 0
        self._highest = -1


def _bisected(found: list[E | None], seqs: list[int], low: int, high: int,
              kept: list[int], each: Sequence[E | None]) -> int:
    """``found`` of ``seqs[low:high]`` not found yet, each's place in ``kept`` (a read's
    ascending seqs) by bisection; how many were found."""
    taken = 0
    for at in range(low, high):
        if found[at] is None:
            place = bisect_left(kept, seqs[at])
            if kept[place] == seqs[at]:
                found[at] = each[place]
                taken += 1
    return taken
