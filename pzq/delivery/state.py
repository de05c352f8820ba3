"""Delivery state of one store area: stored → in flight → acked or ready again.

The area is this node's own messages, or the replicas of a down node whose
delivery this node has taken over (see pzq.delivery.areas).

Invariant: every stored message with a sequence number below the cursor is in
flight, in the redelivery queue, or being deleted. Messages at or past the cursor
have not been delivered since the node started, so after a restart (cursor 0,
nothing in memory) every stored message is ready again, oldest first. A rewind of
the cursor is safe: what is in flight or waiting is skipped.

No socket is touched here: ``deliver`` is given a send function, and every time
comes in as ``now_us``, so the state machine is tested without sleeping. What is
owed to the store is kept apart (pzq.delivery.owed), and so is the answer to
whether another node has a message out (pzq.delivery.held), given at creation.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import NamedTuple, cast

from pzq.counters import Counters
from pzq.delivery import first_runs as runs
from pzq.delivery.areas import Area
from pzq.delivery.delayed import DelayedDeliveries
from pzq.delivery.expiry import DROP, NO_EXPIRY, Expiry
from pzq.delivery.first_runs import ONE_BY_ONE, RunOutlet
from pzq.delivery.framing import SendFrames, delivery_frames
from pzq.delivery.held import NOBODY_ELSE, HeldElsewhere
from pzq.delivery.inflight import InFlight, InFlightTable
from pzq.delivery.lanes import NO_LANES, Lanes, NoLanes, TopicLanes
from pzq.delivery.owed import OwedWrites
from pzq.delivery.redelivery import RedeliveryQueue
from pzq.delivery.settings import DeliverySettings
from pzq.protocol.message_keys import message_key
from pzq.store import record
from pzq.store.batch import Batch, Participant

# A delivery as the store holds it: seq, message key, stored record, its delivery count
# with this one; False: no consumer can take it now. The endpoint encodes it.
Outlet = Callable[[int, bytes, bytes, int], bool]
CURSOR_CHUNK = 256
SEQ_OF, VALUE_OF = attrgetter("seq"), attrgetter("value")  # of entries, in C


class Acked(NamedTuple):
    """Deliveries an ACK of many keys removed: their seqs, and when each was sent (0:
    not since the node started)."""

    seqs: list[int]
    sent_us: list[int]


class DeliveryState(Participant):
    """``held``: which of this node's messages another node has out (it took them over
    while this node was away); not delivered here until it lets them go."""

    def __init__(self, area: Area, settings: DeliverySettings, counters: Counters,
                 held: HeldElsewhere = NOBODY_ELSE, expiry: Expiry = NO_EXPIRY,
                 lanes: Lanes | TopicLanes | NoLanes = NO_LANES) -> None:
        self.area = area
        self.apply(settings)
        self.counters = counters
        self.inflight = InFlightTable(settings.inflight_size)
        self.ready = RedeliveryQueue()
        self.delayed = DelayedDeliveries()  # given back, waiting out a backoff
        self.cursor = 0
        # Where the first deliveries had gone before a restart (or on the origin, for a
        # takeover): a message below it comes again with a count of at least 2.
        self.delivered_before = area.delivered_below()
        self.owed = OwedWrites(self.delivered_before)
        # Deliveries sent before the last reaper run may be evicted; younger ones
        # may not, so a full table waits for ACKs or the next run instead of
        # churning out duplicates as fast as consumers take them.
        self.evictable_before_us = 0
        self._table_full = False  # set when nothing could be evicted; cleared by any change
        self._newly_dead: list[InFlight] = []  # for the archive: take_newly_dead
        self._newly_dropped: list[InFlight] = []  # expired and deleted: take_newly_dropped
        self.expiry = expiry  # whether a message expired (pzq.delivery.expiry)
        self.lanes = lanes  # messages with a priority, served first (pzq.delivery.lanes)
        self._lane_passed: set[int] = set()  # lane messages at or past the cursor taken
        # A paused state delivers nothing and lets expired deliveries go: its area's
        # origin is back and delivers them itself. ACKs are still applied.
        self.paused = False
        self.held = held
        self.held_elsewhere = held.holds  # asked once per message
        self.run_at_least = runs.RUN_AT_LEAST  # a shorter read goes one at a time

    def apply(self, settings: DeliverySettings) -> None:
        """Settings from now on (an operator changed a group's): deliveries out keep
        the deadline they were sent with."""
        self.settings = settings
        self.with_headers = settings.with_headers
        self.max_deliveries = settings.max_deliveries
        self.ack_timeout_us = settings.ack_timeout_us

    def has_work(self) -> bool:
        """Something to deliver and room to track it (so the loop can wait otherwise)."""
        if self._table_full or self.paused:
            return False
        return bool(self.ready) or self.cursor < self.area.end_seq()

    def lowest_open(self) -> int:
        """Every message below this seq that the state read is done with (acked, dead,
        or its delete under way): what a restart need not walk again."""
        return min([self.cursor, *self.inflight.seqs(), *self.ready.seqs(),
                    *self.delayed.seqs(), *self.owed.leaving_seqs()])

    def oldest_open(self) -> tuple[int, bytes] | None:
        """(seq, record) of the oldest message the group has not ACKed, held or not
        (None: none): the lowest of what is out or given back, and the first message
        at the cursor (one read). For figures, not per message."""
        found = [entry for table in (self.inflight, self.ready, self.delayed)
                 if (entry := table.lowest()) is not None]
        best = min(((entry.seq, entry.value) for entry in found), default=None)
        if best is None or best[0] > self.cursor:  # a chunk: an area skips what it lacks
            for seq, value in self.area.read(self.cursor, CURSOR_CHUNK).found[:1]:
                if best is None or seq < best[0]:
                    best = (seq, value)
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

    def written(self) -> None:
        self.owed.written()

    def failed(self) -> None:
        """Keep the batch's deletes for the next one; ACKed messages must not linger."""
        self.owed.failed()

    # -- consumer ACKs -------------------------------------------------------

    def ack(self, batch: Batch, seq: int) -> InFlight | None:
        """Remove an acknowledged message; returns what was removed, None if unknown."""
        self._table_full = False
        entry = self.inflight.pop(seq)
        if entry is None:
            entry = self._acked_late(batch, seq)
            if entry is None:
                return None
        self.owed.delete(batch, self.area, seq, entry.size)
        self.counters.acked += 1
        return entry

    def ack_all(self, batch: Batch, seqs: list[int]) -> tuple[Acked, list[bool], list[int]]:
        """``ack`` of each seq, the in-flight table and the area's deletes done in bulk:
        what was removed, for each whether its message left the store (no other group
        holds it), and the seqs not known."""
        self._table_full = False
        taken = self.inflight.take_all(seqs)
        seqs, values, sent_us = taken.seqs, taken.values, taken.sent_us
        sizes = list(map(len, values))
        # their deletes go with the batch being built (and again if it fails); before
        # the look at the others (a key ACKed twice)
        self.owed.deleting.update(zip(seqs, sizes, strict=True))
        unknown: list[int] = []
        if taken.missing:  # given back, or stored only: one by one
            late = self._acked_late_all(batch, taken.missing, unknown)
            seqs, sent_us = seqs + list(map(SEQ_OF, late)), sent_us + [e.sent_us for e in late]
            sizes += map(len, map(VALUE_OF, late))
        finals = self.area.delete_all(batch, seqs, sizes)
        self.counters.acked += len(seqs)
        return Acked(seqs, sent_us), finals, unknown

    def _acked_late_all(self, batch: Batch, seqs: list[int], unknown: list[int]
                        ) -> list[InFlight]:
        """``_acked_late`` of each seq, its delete owed before the next one's look (a
        key ACKed twice); the unknown ones added to ``unknown``."""
        late = []
        for seq in seqs:
            entry = self._acked_late(batch, seq)
            if entry is None:
                unknown.append(seq)
            else:
                self.owed.deleting[seq] = len(entry.value)
                late.append(entry)
        return late

    def _acked_late(self, batch: Batch, seq: int) -> InFlight | None:
        """An ACK of a message no longer in flight: given back and waiting, or only in
        the store; counted late (None: unknown, counted so)."""
        entry = self.ready.remove(seq) or self.delayed.remove(seq) \
            or self._stored_entry(batch, seq)
        if entry is None:
            self.counters.unknown_acks += 1
            return None
        self.counters.late_acks += 1
        return entry

    def peek(self, batch: Batch, seq: int) -> InFlight | None:
        """What ``ack`` would remove, without removing it (to archive it first)."""
        return (self.inflight.get(seq) or self.ready.get(seq) or self.delayed.get(seq)
                or self._stored_entry(batch, seq))

    def peek_all(self, batch: Batch, seqs: list[int]) -> list[InFlight]:
        """``peek`` of each seq, those in flight taken in one step; the unknown left out."""
        found = self.inflight.get_all(seqs)
        if all(found):  # (an entry is always true: no comparison made per entry)
            return cast(list[InFlight], found)
        return [entry for entry in (entry or self.peek(batch, seq)
                                    for seq, entry in zip(seqs, found, strict=True))
                if entry is not None]

    def _stored_entry(self, batch: Batch, seq: int) -> InFlight | None:
        """A message ACKed after it left memory (e.g. sent before a restart)."""
        if self.owed.leaving(seq):
            return None
        value = self.area.get(seq)
        if value is None:
            return None
        first_delivered_us, deliveries = record.bookkeeping(value)
        return InFlight(seq, value, 0, 0, deliveries, first_delivered_us)

    def take_newly_dead(self) -> list[InFlight]:
        """Messages moved to the dead letters since the last call."""
        dead, self._newly_dead = self._newly_dead, []
        return dead

    def take_newly_dropped(self) -> list[InFlight]:
        """Expired messages deleted (a topic with on_expire=drop) since the last call."""
        dropped, self._newly_dropped = self._newly_dropped, []
        return dropped

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
        self.owed.rewrites.pop(entry.seq, None)
        self.owed.expired.add(entry.seq)
        if fate == DROP:
            self.owed.dropping[entry.seq] = len(entry.value)
            self._newly_dropped.append(entry)
            return
        entry.value = record.with_bookkeeping(entry.value, entry.first_delivered_us,
                                              entry.deliveries)
        self.owed.dead[entry.seq] = entry.value
        self._newly_dead.append(entry)

    def forget(self, seq: int) -> None:
        """Acked on another node: stop tracking the message here (and write nothing of
        it: a count written after its delete would bring it back)."""
        self.owed.rewrites.pop(seq, None)
        self.inflight.pop(seq)
        self.ready.remove(seq)
        self.delayed.remove(seq)
        self._table_full = False

    def nack(self, seq: int, due_us: int = 0) -> bool:
        """Give a delivery back: to go again now, or once ``due_us`` has come."""
        self._table_full = False
        entry = self.inflight.pop(seq)
        if entry is None:
            self.counters.unknown_acks += 1
            return False
        self.counters.nacked += 1
        self._give_back(entry, due_us)
        return True

    def extend(self, seq: int, now_us: int) -> bool:
        """The consumer is still at work on it: its deadline starts again (it goes to
        the end of the table, which stays in deadline order)."""
        entry = self.inflight.pop(seq)
        if entry is None:
            return False
        entry.deadline_us = now_us + self.ack_timeout_us
        self.inflight.add(entry)
        return True

    def reject(self, seq: int) -> bool:
        """Given up by its consumer: to the dead letters now, never delivered again."""
        self._table_full = False
        entry = self.inflight.pop(seq) or self.ready.remove(seq) or self.delayed.remove(seq)
        if entry is None:
            self.counters.unknown_acks += 1
            return False
        self._to_dead(entry)
        return True

    # -- reaper ----------------------------------------------------------------

    def reap(self, now_us: int) -> int:
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
        self.owed.rewrites.pop(entry.seq, None)
        self.owed.dead[entry.seq] = entry.value
        self._newly_dead.append(entry)
        self.counters.dead_lettered += 1

    def take_due(self, now_us: int) -> None:
        """Delayed deliveries whose wait is over: ready to go again, in turn."""
        if self.delayed:
            for entry in self.delayed.take_due(now_us):
                self.ready.push(entry)

    def next_due_us(self) -> int | None:
        """When the soonest delayed delivery is due (None: none waits): the loop wakes
        then, so a backoff or a NACK's delay ends on time, not at a reaper run."""
        return self.delayed.next_due_us() if self.delayed else None

    def _give_back(self, entry: InFlight, due_us: int = 0) -> None:
        """Ready again (at ``due_us``: after a wait), or to the dead letters once
        delivered too often. Its count is in the store already if it was delivered
        more than once (see _send)."""
        if self.max_deliveries and entry.deliveries >= self.max_deliveries:
            self._to_dead(entry)
            return
        entry.value = record.with_bookkeeping(entry.value, entry.first_delivered_us,
                                              entry.deliveries)
        if due_us:
            self.delayed.push(entry, due_us)
        else:
            self.ready.push(entry)

    # -- delivery --------------------------------------------------------------

    def deliver(self, send: SendFrames, now_us: int, limit: int) -> int:
        """Send up to ``limit`` messages in --send-dsn's frames, given-back ones first,
        until send says no."""
        return self.deliver_raw(self.framing(send, now_us), now_us, limit)

    def framing(self, send: SendFrames, now_us: int) -> Outlet:
        """An outlet that sends each delivery in --send-dsn's frames."""
        ack_timeout_us, with_headers = self.ack_timeout_us, self.with_headers

        def outlet(seq: int, key: bytes, value: bytes, deliveries: int) -> bool:
            return send(delivery_frames(key, value, deliveries, now_us, ack_timeout_us,
                                        with_headers))
        return outlet

    def deliver_raw(self, send: Outlet, now_us: int, limit: int,
                    send_run: RunOutlet = ONE_BY_ONE) -> int:
        """Hand up to ``limit`` stored records to ``send``, given-back ones first, until
        it says no; runs of first deliveries to ``send_run`` (pzq.delivery.first_runs)."""
        self.take_due(now_us)
        sent = 0
        watching = self.expiry.watching(now_us)
        lanes = self.lanes.waiting  # once a run, after what was given back
        while sent < limit:
            if self.ready:
                entry = self.ready.pop()
                if self.held_elsewhere(entry.seq):
                    continue  # stays stored; a rewind finds it once it is let go
                if watching and (fate := self.expiry.verdict(entry.seq, entry.value,
                                                             now_us)):
                    self._expire(entry, fate)
                    continue
                if not self._send(send, entry, now_us):
                    self.ready.push_front(entry)
                    break
                sent += 1
                continue
            if lanes:
                lanes = False
                new, blocked = self._deliver_lanes(send, now_us, limit - sent, watching)
                sent += new
                if blocked:
                    break
                continue
            new, more = self._deliver_new(send, now_us, limit - sent, watching, send_run)
            sent += new
            if not more:
                break
        return sent

    def _deliver_new(self, send: Outlet, now_us: int, limit: int, watching: bool = False,
                     send_run: RunOutlet = ONE_BY_ONE) -> tuple[int, bool]:
        """Messages from the cursor on, a run of first deliveries at the read's start in
        one go; returns (sent, whether to go on). The cursor moves past a message once
        it went out or was found taken, and past what the read looked at and skipped,
        never further."""
        if self.cursor >= self.area.end_seq():
            return 0, False
        start = self.cursor
        chunk = self.area.read(start, min(CURSOR_CHUNK, limit))
        found, sent = chunk.found, 0
        # (the pool's outlet takes no run: not even the run is looked for, a window of 1
        # would pay it on every message)
        if send_run is not ONE_BY_ONE and len(found) >= self.run_at_least:
            sent = self._deliver_run(send_run, found, now_us, watching, chunk.fresh)
            found = runs.rest_of(found, self.cursor)
        inflight, delivered_before = self.inflight, self.delivered_before
        # Mostly only the in-flight table holds any of them: the others are asked only
        # when one of them has something (nothing is added to them while this runs,
        # but for evictions, which end the loop).
        look_further = self._others_may_hold()
        bookkeeping_of, bookkeeping_at = record.BOOKKEEPING.unpack_from, record.BOOKKEEPING_OFFSET
        for seq, value in found:
            if seq in inflight or (look_further and self._taken(seq)):
                self.cursor = seq + 1
                continue
            first_delivered_us, deliveries = bookkeeping_of(value, bookkeeping_at)
            if seq < delivered_before:
                deliveries = max(deliveries, 1)  # out before the restart, count not kept
            entry = InFlight(seq, value, 0, 0, deliveries, first_delivered_us)
            if watching and (fate := self.expiry.verdict(seq, value, now_us)):
                self._expire(entry, fate)  # never delivered once expired
                self.cursor = seq + 1
                continue
            if not self._send(send, entry, now_us):
                return sent, False
            self.cursor = seq + 1
            sent += 1
            if self.ready:  # evicted deliveries go before newer messages
                return sent, True
        self.cursor = max(self.cursor, chunk.next_seq)
        return sent, self.cursor > start  # no progress: a read that cannot go on

    def _deliver_run(self, send_run: RunOutlet, found: list[tuple[int, bytes]],
                     now_us: int, watching: bool, fresh: bool) -> int:
        """The run of first deliveries at the start of a read, to ``send_run``: those
        it took are tracked and the cursor moves past them; returns how many."""
        inflight = self.inflight
        run = runs.first_run(found, self._taken_among([seq for seq, _ in found]),
                             self.delivered_before, inflight.max_bytes - inflight.bytes, fresh)
        if watching and run.seqs:
            run = runs.unexpired(run, self.expiry.verdict, now_us)
        if not run.seqs:
            return 0
        count = send_run(self.area.node_id, run.seqs, run.values)
        if count:
            inflight.add_run(run.seqs[:count], run.values[:count], now_us,
                             now_us + self.ack_timeout_us, run.size_of(count))
            self.counters.delivered += count
            self.cursor = run.seqs[count - 1] + 1
        return count

    def _deliver_lanes(self, send: Outlet, now_us: int, limit: int,
                       watching: bool) -> tuple[int, bool]:
        """Lane messages at or past the cursor that the group holds and has not taken,
        highest priority first; returns (sent, whether a send was refused). Below the
        cursor every message is out, waiting or done already (the invariant)."""
        sent, cursor, passed = 0, self.cursor, self._lanes_passed_from(self.cursor)
        for key, seq in self.lanes.entries():
            if sent >= limit:
                break
            if seq < cursor or seq in passed or self._taken(seq):
                continue
            value = self.area.get(seq)  # None: not the group's, done, or gone
            if value is None or not self.area.holds(seq, value):
                passed.add(seq)
                if value is None and not self.lanes.exists(seq):
                    self.lanes.gone(key)
                continue
            first_delivered_us, deliveries = record.bookkeeping(value)
            if seq < self.delivered_before:
                deliveries = max(deliveries, 1)  # out before the restart, count not kept
            entry = InFlight(seq, value, 0, 0, deliveries, first_delivered_us)
            passed.add(seq)
            if watching and (fate := self.expiry.verdict(seq, value, now_us)):
                self._expire(entry, fate)
                continue
            if not self._send(send, entry, now_us):
                passed.discard(seq)
                return sent, True
            if entry.deliveries == 1:  # past the cursor: no delivered-below mark covers it
                self.owed.rewrites[seq] = record.with_bookkeeping(
                    entry.value, entry.first_delivered_us, 1)
            sent += 1
        return sent, False

    def _lanes_passed_from(self, cursor: int) -> set[int]:
        """The lane messages looked at and passed over, forgetting those the cursor
        has overtaken (below it, the cursor's own bookkeeping covers them)."""
        passed = self._lane_passed
        if passed and min(passed) < cursor:
            passed.difference_update([seq for seq in passed if seq < cursor])
        return passed

    def _others_may_hold(self) -> bool:
        """Whether a message may be taken by anything but the in-flight table."""
        return bool(self.ready or self.delayed or self.owed.any_leaving() or self.held.any())

    def _taken_among(self, seqs: list[int]) -> set[int]:
        """Those of ``seqs`` that are ``_taken``, each table looked at in one go."""
        taken = self.inflight.among(seqs)
        if self._others_may_hold():
            taken |= self.ready.among(seqs) | self.delayed.among(seqs) \
                | self.owed.leaving_among(seqs)
            if self.held.any():  # (a takeover's aftermath: rare)
                taken.update(filter(self.held_elsewhere, seqs))
        return taken

    def _taken(self, seq: int) -> bool:
        """Out, waiting to go again, leaving the store, or another node's for now."""
        return (seq in self.inflight or seq in self.ready or seq in self.delayed
                or self.owed.leaving(seq) or self.held_elsewhere(seq))

    def _send(self, send: Outlet, entry: InFlight, now_us: int) -> bool:
        if not self._room_for(entry):
            self._table_full = True
            return False
        deliveries = entry.deliveries + 1
        if not send(entry.seq, message_key(self.area.node_id, entry.seq), entry.value,
                    deliveries):
            return False
        entry.sent_us = now_us
        entry.deadline_us = now_us + self.ack_timeout_us
        entry.deliveries = deliveries
        entry.first_delivered_us = entry.first_delivered_us or now_us
        if deliveries > 1:  # kept, so that the count only grows across a restart
            self.owed.rewrites[entry.seq] = record.with_bookkeeping(
                entry.value, entry.first_delivered_us, deliveries)
        for evicted in self.inflight.add(entry):
            self.counters.evicted += 1
            self._give_back(evicted)
        self.counters.delivered += 1
        self.counters.redelivered += deliveries > 1
        return True

    def _room_for(self, entry: InFlight) -> bool:
        if self.inflight.bytes + len(entry.value) <= self.inflight.max_bytes:
            return True
        oldest = self.inflight.oldest()
        return oldest is None or oldest.sent_us < self.evictable_before_us
