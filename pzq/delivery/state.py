"""Delivery state of one store area: stored → in flight → acked or ready again.

The area is this node's own messages, or the replicas of a down node whose
delivery this node has taken over (see pzq.delivery.areas).

Invariant: every stored message with a sequence number below the cursor is in
flight, in the redelivery queue, or being deleted. Messages at or past the cursor
have not been delivered since the node started, so after a restart (cursor 0,
nothing in memory) every stored message is ready again, oldest first. A rewind of
the cursor is safe: what is in flight or waiting is skipped.

No socket is touched here: ``deliver`` is given a send function, and every time
comes in as ``now_us``, so the state machine is tested without sleeping. The state
is one class made of its sides, each in a module of its own: its tables and the
ways back without an ACK, the reaper's among them (pzq.delivery.tracking), the
delivery pass (pzq.delivery.delivering) and a consumer's answers
(pzq.delivery.acking). What is owed to the store is kept apart (pzq.delivery.owed),
and so is the answer to whether another node has a message out
(pzq.delivery.held), given at creation.
"""

from __future__ import annotations

from pzq.delivery.acking import Acking
from pzq.delivery.delivering import CURSOR_CHUNK, Delivering
from pzq.store.batch import Batch


class DeliveryState(Delivering, Acking):
    """One store area's delivery, its sides in one class. ``held``: which of this
    node's messages another node has out (it took them over while this node was
    away); not delivered here until it lets them go."""

    def has_work(self) -> bool:
        """Something to deliver and room to track it (so the loop can wait otherwise)."""
        if self._table_full or self.paused:
            return False
        return bool(self.ready) or self.cursor < self.area.end_seq()

    def lowest_open(self) -> int:
        """Every message below this seq that the state read is done with (acked, dead,
        or its delete under way): what a restart need not walk again."""
        return min([self.cursor, *self.inflight.held_seqs(), *self.ready.seqs(),
                    *self.delayed.seqs(), *self.owed.leaving_seqs()])

    def oldest_open(self) -> tuple[int, bytes] | None:
        """(seq, record) of the oldest message the group has not ACKed, held or not
        (None: none): the lowest of what is out or given back, and the first message
        at the cursor (one read). For figures, not per message."""
        found = [entry for table in (self.inflight, self.ready, self.delayed)
                 if (entry := table.lowest()) is not None]
        best = min(((entry.seq, entry.value) for entry in found), default=None)
        if best is None or best[0] > self.cursor:  # a chunk: an area skips what it lacks
            chunk = self.area.read(self.cursor, CURSOR_CHUNK)
            if chunk.seqs and (best is None or chunk.seqs[0] < best[0]):
                best = (chunk.seqs[0], chunk.values[0])
        return best

    def rewind(self, delivered_below: int = 0) -> None:
        """Look at every stored message again (the takeover rule's answer changed, or
        an operator's seek): what the cursor passed was delivered, here or elsewhere,
        and so was what lies below ``delivered_below`` (how far the area's first
        deliveries went, as known now: a takeover's origin may have delivered more
        since this state was made)."""
        self.delivered_before = max(self.delivered_before, self.cursor, delivered_below)
        self.cursor = 0
        self._lane_passed.clear()  # a seek back may make them the group's again
        self._table_full = False

    # -- store batches -------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        """Start a batch with what earlier wakes left to write: how far the first
        deliveries went, the counts of messages delivered again, deletes, dead letters."""
        self.owed.prepare(batch, self.area, self.cursor, self.expiry.expired_final)
        self.waits.prepare(batch)

    def written(self) -> None:
        """The batch's containers emptied; idle (a batch asks it nothing) until it owes
        the store something again: the cursor moves past what is written of it (a
        delivery pass), an ACK deletes, a delivery is given up or expires (each of
        which sets ``idle`` False)."""
        self.owed.written()
        self.waits.written()
        self.idle = (self.cursor <= self.owed.delivered_kept and not self.owed.owes_next()
                     and not self.waits.owes())

    def failed(self) -> None:
        """Keep the batch's deletes for the next one; ACKed messages must not linger."""
        self.owed.failed()
        self.waits.failed()
        self.idle = False
