"""What a delivery state owes the store, written with the next batch: how far its
first deliveries went, the counts of messages delivered again, the deletes of ACKed
messages and the moves to the dead letters. A batch that fails to write keeps them
for the next one (an ACKed message must not linger), and a message on its way out
is not delivered meanwhile (``leaving``).
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.delivery.areas import Area
from pzq.store.batch import Batch

# The last group holding an expired message let it go: batch, seq, record, whether it
# goes to the dead letters (pzq.delivery.expiry counts it and says why).
Final = Callable[[Batch, int, bytes, bool], None]


class OwedWrites:
    def __init__(self, delivered_below: int) -> None:
        self.delivered_kept = delivered_below  # how far first deliveries went, as written
        self.delivered_writing = 0  # the figure kept before the batch being built
        self.rewrites: dict[int, bytes] = {}  # given-back messages' counts
        self.rewriting: dict[int, bytes] = {}  # ... in the batch being built
        self.unwritten_deletes: dict[int, int] = {}  # deletes whose batch failed
        self.deleting: dict[int, int] = {}  # deletes in the batch being built
        # ... an ACK's many, as its lists (seqs, sizes): put in ``deleting`` only when a
        # look needs them (mostly none does before the batch is written)
        self._deleting_runs: list[tuple[list[int], list[int]]] = []
        self._deleting_runs_highest = -1  # their highest seq (-1: none), kept as they come
        self.dead: dict[int, bytes] = {}  # delivered too often: to the dead letters
        self.dead_moving: dict[int, bytes] = {}  # ... in the batch being built
        self.dropping: dict[int, int] = {}  # expired on a topic that drops them: seq, size
        self.dropping_now: dict[int, int] = {}  # ... in the batch being built
        self.expired: set[int] = set()  # of the dead and dropping, those that expired
        self.expired_now: set[int] = set()  # ... in the batch being built

    def prepare(self, batch: Batch, area: Area, cursor: int, expired_final: Final) -> None:
        """Start a batch with what earlier wakes left to write. An expired message the
        group lets go is counted (``expired_final``) when no other group holds it, and
        its dead letter says why."""
        self.delivered_writing = self.delivered_kept
        if cursor > self.delivered_kept:
            area.keep_delivered_below(batch, cursor)
            self.delivered_kept = cursor
        # (each container swapped only when it holds something: most batches of a
        # node that only takes producers owe none, and make no new ones)
        if self.rewrites:
            for seq, value in self.rewrites.items():
                area.rewrite(batch, seq, value)
            self.rewriting, self.rewrites = self.rewrites, {}
        if self.unwritten_deletes:
            unwritten, self.unwritten_deletes = self.unwritten_deletes, {}
            for seq, size in unwritten.items():
                self.delete(batch, area, seq, size)
        if self.expired:
            self.expired_now, self.expired = self.expired, set()
        if self.dead:
            self._move_dead(batch, area, expired_final)
        if self.dropping:
            self._drop(batch, area, expired_final)

    def _move_dead(self, batch: Batch, area: Area, expired_final: Final) -> None:
        self.dead_moving, self.dead = self.dead, {}
        for seq, value in self.dead_moving.items():
            if seq in self.expired_now and area.would_release(seq):
                expired_final(batch, seq, value, True)
            area.dead_letter(batch, seq, value)

    def _drop(self, batch: Batch, area: Area, expired_final: Final) -> None:
        self.dropping_now, self.dropping = self.dropping, {}
        for seq, size in self.dropping_now.items():
            if area.would_release(seq):
                stored = area.get(seq)
                if stored is not None:
                    expired_final(batch, seq, stored, False)
            area.delete(batch, seq, size)

    def written(self) -> None:
        """The batch's containers emptied (made anew only when something was in them:
        ``prepare`` leaves them empty otherwise)."""
        if self.deleting:
            self.deleting = {}
        if self._deleting_runs:
            self._deleting_runs = []
            self._deleting_runs_highest = -1
        if self.dead_moving:
            self.dead_moving = {}
        if self.rewriting:
            self.rewriting = {}
        if self.dropping_now:
            self.dropping_now = {}
        if self.expired_now:
            self.expired_now = set()

    def failed(self) -> None:
        """Keep the batch's deletes for the next one; counts and how far deliveries went
        are written again too."""
        self.delivered_kept = self.delivered_writing
        self.rewrites = {**self.rewriting, **self.rewrites}
        self.rewriting = {}
        self.unwritten_deletes.update(self._deleting())
        self.deleting = {}
        self.dead.update(self.dead_moving)
        self.dead_moving = {}
        self.dropping.update(self.dropping_now)
        self.dropping_now = {}
        self.expired |= self.expired_now
        self.expired_now = set()

    def delete(self, batch: Batch, area: Area, seq: int, size: int) -> None:
        self.deleting[seq] = size
        area.delete(batch, seq, size)

    def delete_run(self, seqs: list[int], sizes: list[int], ascending: bool = False) -> None:
        """The deletes of many messages (each seq with its record's size) go with the
        batch being built (its area's deletes are the caller's); the lists are kept as
        they are, not changed after. ``ascending``: the seqs are (the last is the
        highest: no compare of each)."""
        if not seqs:
            return
        self._deleting_runs.append((seqs, sizes))
        highest = seqs[-1] if ascending else max(seqs)
        if highest > self._deleting_runs_highest:
            self._deleting_runs_highest = highest

    def _deleting(self) -> dict[int, int]:
        """``deleting``, the runs put in."""
        if self._deleting_runs:
            for seqs, sizes in self._deleting_runs:
                self.deleting.update(zip(seqs, sizes, strict=True))
            self._deleting_runs = []
            self._deleting_runs_highest = -1
        return self.deleting

    def leaving(self, seq: int) -> bool:
        """Its delete or its move to the dead letters is under way."""
        return (seq in self._deleting() or seq in self.unwritten_deletes
                or seq in self.dead or seq in self.dead_moving
                or seq in self.dropping or seq in self.dropping_now)

    def leaving_among(self, seqs: list[int]) -> set[int]:
        """Those of ``seqs`` whose delete or move is under way (``leaving`` of each,
        with no call per seq)."""
        deleting, unwritten, dead = self._deleting(), self.unwritten_deletes, self.dead
        moving, dropping, dropping_now = self.dead_moving, self.dropping, self.dropping_now
        return {seq for seq in seqs if seq in deleting or seq in unwritten or seq in dead
                or seq in moving or seq in dropping or seq in dropping_now}

    def owes_next(self) -> bool:
        """Something waits for the next batch's ``prepare`` (but how far the first
        deliveries went, which the state compares with its cursor)."""
        return bool(self.rewrites or self.unwritten_deletes or self.expired or self.dead
                    or self.dropping)

    def any_leaving(self) -> bool:
        return self.any_leaving_from(0)

    def any_leaving_from(self, seq: int) -> bool:
        """Whether some message at or past ``seq`` is leaving: an ACK's many, not yet
        looked at, by their highest, kept as they came (a pass asks this of each group
        once or twice: a walk of every ACK's seqs cost some 700 instructions a delivery
        at three groups); the rest, if any, counts whatever its seqs."""
        if (self.unwritten_deletes or self.deleting or self.dead or self.dead_moving
                or self.dropping or self.dropping_now):
            return True
        return self._deleting_runs_highest >= seq

    def leaving_seqs(self) -> list[int]:
        return [*self.unwritten_deletes, *self.dead, *self._deleting(), *self.dead_moving,
                *self.dropping, *self.dropping_now]
