"""What a DeliveryState tracks, and the ways back that need no ACK.

The tables (in flight, ready again, delayed) and what is owed to the store are kept
here for the state's two sides (pzq.delivery.delivering sends, pzq.delivery.acking
takes a consumer's answers), with the moves both make: a delivery given back (ready,
after a backoff, or dead once delivered too often), sent to the dead letters, or
expired; and the reaper, which gives back what was not ACKed in time.
"""

from __future__ import annotations

from pzq.clock import Now
from pzq.counters import Counters
from pzq.delivery import first_runs as runs
from pzq.delivery.areas import Area
from pzq.delivery.delayed import DelayedDeliveries
from pzq.delivery.expiry import DROP, NO_EXPIRY, Expiry
from pzq.delivery.held import NOBODY_ELSE, HeldElsewhere
from pzq.delivery.inflight import InFlight, InFlightTable
from pzq.delivery.lanes import NO_LANES, Lanes, NoLanes, TopicLanes
from pzq.delivery.owed import OwedWrites
from pzq.delivery.redelivery import RedeliveryQueue
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.waits import NO_WAITS, KeptWaits, Waits
from pzq.store import record
from pzq.store.batch import Batch, Participant


class Tracking(Participant):
    """The tables and marks of one store area's delivery, kept for both its sides; the
    reaper, and the moves that take a delivery back or out without an ACK."""

    def __init__(self, area: Area, settings: DeliverySettings, counters: Counters,
                 held: HeldElsewhere = NOBODY_ELSE, expiry: Expiry = NO_EXPIRY,
                 lanes: Lanes | TopicLanes | NoLanes = NO_LANES,
                 waits: Waits = NO_WAITS) -> None:
        self.area = area
        self.apply(settings)
        self.counters = counters
        self.inflight = InFlightTable(settings.inflight_size)
        self.ready = RedeliveryQueue()
        # given back, waiting out a backoff or a NACK's delay; each wait kept in the
        # store where the area's are (``waits``: its own messages')
        self.waits = waits
        self.delayed = DelayedDeliveries(waits)
        self.cursor = 0
        # Where the first deliveries had gone before a restart (or on the origin, for a
        # takeover): a message below it comes again with a count of at least 2.
        self.delivered_before = area.delivered_below()
        self.owed = OwedWrites(self.delivered_before)
        # The area's end when the state was made: a message stored since went out only
        # from this state (the cursor passed it, or a priority's count was kept), so an
        # ACK of one that did not is of a message never delivered (see Acking).
        self.stored_before = area.end_seq()
        # (Participant) True while it owes the store nothing: a batch asks it nothing.
        # Set False by whatever gives it something to write (a delivery pass, an ACK,
        # a delivery given up or expired), True again by ``written`` once all is.
        self.idle = False
        # Deliveries sent before the last reaper run may be evicted; younger ones
        # may not, so a full table waits for ACKs or the next run instead of
        # churning out duplicates as fast as consumers take them.
        self.evictable_before_us = 0
        self._table_full = False  # set when nothing could be evicted; cleared by any change
        # (read to see whether any are there, without a call; taken by the take_ below)
        self.newly_dead: list[InFlight] = []  # for the archive: take_newly_dead
        self.newly_dropped: list[InFlight] = []  # expired and deleted: take_newly_dropped
        self.expiry = expiry  # whether a message expired (pzq.delivery.expiry)
        self.lanes = lanes  # messages with a priority, served first (pzq.delivery.lanes)
        self._lane_passed: set[int] = set()  # lane messages at or past the cursor taken
        # A paused state delivers nothing and lets expired deliveries go: its area's
        # origin is back and delivers them itself. ACKs are still applied.
        self.paused = False
        self.held = held  # which messages another node has out (see DeliveryState)
        self.held_elsewhere = held.holds  # asked once per message
        self.run_at_least = runs.RUN_AT_LEAST  # a shorter read goes one at a time
        if isinstance(waits, KeptWaits):  # (NO_WAITS is shared, and owes nothing)
            waits.owing = self._owes_store
            self._restore_waits()

    def _owes_store(self) -> None:
        """Something is owed to the store (a wait's key): the next batch asks."""
        self.idle = False

    def _restore_waits(self) -> None:
        """The waits kept before a restart, back in the ``delayed`` table: each goes
        again at its due time (at once if it passed); a key whose message the group is
        done with goes with the next batch. Its last sending is not kept: it counts as
        given back now (PENDING's idle time counts from the restart, not from 1970)."""
        restored_us = Now.read().wall_us
        for seq, due_us in self.waits.load():
            value = self.area.get(seq)
            if value is None:
                self.waits.end(seq)
                continue
            first_delivered_us, deliveries = record.bookkeeping(value)
            # (given back, so out at least once: its count goes on from there)
            self.delayed.restore(InFlight(seq, value, restored_us, 0, max(deliveries, 1),
                                          first_delivered_us), due_us)

    def apply(self, settings: DeliverySettings) -> None:
        """Settings from now on (an operator changed a group's): deliveries out keep
        the deadline they were sent with."""
        self.settings = settings
        self.with_headers = settings.with_headers
        self.max_deliveries = settings.max_deliveries
        self.ack_timeout_us = settings.ack_timeout_us

    # -- the reaper and the ways back ------------------------------------------

    def reap(self, now_us: int) -> int:
        """Deliveries not ACKed by their deadline: given back (after the group's
        backoff), or let go by a paused state; returns how many."""
        self.evictable_before_us = now_us
        self._table_full = False
        expired = self.inflight.expire(now_us)
        if self.paused:
            return 0
        for entry in expired:
            wait_us = self.settings.backoff_after(entry.deliveries)
            self._give_back(entry, now_us + wait_us if wait_us else 0)
        self.counters.expired += len(expired)
        self.take_due(now_us)
        return len(expired)

    def _to_dead(self, entry: InFlight) -> None:
        """To the dead letters with the next batch, with its history."""
        entry.value = record.with_bookkeeping(entry.value, entry.first_delivered_us,
                                              entry.deliveries)
        self.idle = False
        self.owed.rewrites.pop(entry.seq, None)
        self.owed.dead[entry.seq] = entry.value
        self.newly_dead.append(entry)
        self.counters.dead_lettered += 1


    def _give_back(self, entry: InFlight, due_us: int = 0, batch: Batch | None = None
                   ) -> None:
        """Ready again (at ``due_us``: after a wait, kept in ``batch``, else the next
        one), or to the dead letters once delivered too often. Its count is in the
        store already if it was delivered more than once (see Delivering._send)."""
        if self.max_deliveries and entry.deliveries >= self.max_deliveries:
            self._to_dead(entry)
            return
        entry.value = record.with_bookkeeping(entry.value, entry.first_delivered_us,
                                              entry.deliveries)
        if due_us:
            self.delayed.push(entry, due_us, batch)
        else:
            self.ready.push(entry)

    def take_due(self, now_us: int) -> None:
        """Delayed deliveries whose wait is over: ready to go again, in turn."""
        if self.delayed:
            for entry in self.delayed.take_due(now_us):
                self.ready.push(entry)

    def next_due_us(self) -> int | None:
        """When the soonest delayed delivery is due (None: none waits): the loop wakes
        then, so a backoff or a NACK's delay ends on time, not at a reaper run."""
        return self.delayed.next_due_us() if self.delayed else None

    def expire(self, seq: int, value: bytes, fate: int) -> bool:
        """The sweep found the message expired: if this group holds it, it goes now
        (``fate``: DEAD or DROP), unless it is out at a consumer, which keeps it (True:
        out; checked again if it comes back)."""
        if seq in self.inflight:
            return True
        if self.paused or self.owed.leaving(seq):
            return False
        entry = self.ready.remove(seq) or self.delayed.remove(seq)
        if entry is None:
            if self.held_elsewhere(seq) or not self.area.holds(seq, value):
                return False
            first_delivered_us, deliveries = record.bookkeeping(value)
            entry = InFlight(seq, value, 0, 0, deliveries, first_delivered_us)
        self._table_full = False
        self._expire(entry, fate)
        return False

    def _expire(self, entry: InFlight, fate: int) -> None:
        """Never delivered again: to the dead letters or deleted with the next batch."""
        self.idle = False
        self.owed.rewrites.pop(entry.seq, None)
        self.owed.expired.add(entry.seq)
        if fate == DROP:
            self.owed.dropping[entry.seq] = len(entry.value)
            self.newly_dropped.append(entry)
            return
        entry.value = record.with_bookkeeping(entry.value, entry.first_delivered_us,
                                              entry.deliveries)
        self.owed.dead[entry.seq] = entry.value
        self.newly_dead.append(entry)

    def take_newly_dead(self) -> list[InFlight]:
        """Messages moved to the dead letters since the last call."""
        dead, self.newly_dead = self.newly_dead, []
        return dead

    def take_newly_dropped(self) -> list[InFlight]:
        """Expired messages deleted (a topic with on_expire=drop) since the last call."""
        dropped, self.newly_dropped = self.newly_dropped, []
        return dropped

