"""The delivery pass of a DeliveryState: what goes out next, and its tracking once sent.

Given-back deliveries go first, then lane messages (highest priority first), then
the messages from the cursor on, a run of first deliveries at a read's start handed
over in one go (pzq.delivery.first_runs). A message that another table holds (out,
waiting, leaving the store, another node's for now) is passed over; an expired one
is let go, never delivered. A send that has no room in the in-flight table evicts
the oldest delivery sent before the last reaper run, or waits.

No socket is touched: ``deliver`` is given a send function, and time comes in.
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.delivery import first_runs as runs
from pzq.delivery.areas import Chunk
from pzq.delivery.first_runs import ONE_BY_ONE, RunOutlet
from pzq.delivery.framing import SendFrames, delivery_frames
from pzq.delivery.inflight import InFlight
from pzq.delivery.tracking import Tracking
from pzq.protocol.message_keys import message_key
from pzq.store import record

# A delivery as the store holds it: seq, message key, stored record, its delivery count
# with this one; False: no consumer can take it now. The endpoint encodes it.
Outlet = Callable[[int, bytes, bytes, int], bool]
CURSOR_CHUNK = 256  # messages one read from the cursor looks at, at most


class Delivering(Tracking):
    """The sending side of a DeliveryState (pzq.delivery.tracking: its tables)."""

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
        self.idle = False  # (the cursor moves, counts are rewritten: the next batch's)
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
        seqs, values, sent = chunk.seqs, chunk.values, 0
        # (the pool's outlet takes no run: not even the run is looked for, a window of 1
        # would pay it on every message)
        if send_run is not ONE_BY_ONE and len(seqs) >= self.run_at_least:
            sent = self._deliver_run(send_run, chunk, now_us, watching)
            at = runs.rest_at(seqs, self.cursor)
            if at:
                seqs, values = seqs[at:], values[at:]
        inflight, delivered_before = self.inflight, self.delivered_before
        # Mostly only the in-flight table holds any of them: the others are asked only
        # when one of them has something (nothing is added to them while this runs,
        # but for evictions, which end the loop).
        # (none left after a run sent whole, the common case: nothing to look at)
        look_further = self._others_may_hold(start) if seqs else False
        bookkeeping_of, bookkeeping_at = record.BOOKKEEPING.unpack_from, record.BOOKKEEPING_OFFSET
        for seq, value in zip(seqs, values, strict=True):
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

    def _deliver_run(self, send_run: RunOutlet, chunk: Chunk, now_us: int,
                     watching: bool) -> int:
        """The run of first deliveries at the start of a read, to ``send_run``: those
        it took are tracked and the cursor moves past them; returns how many."""
        inflight = self.inflight
        run = runs.first_run(chunk.seqs, chunk.values, self._taken_among(chunk.seqs),
                             self.delivered_before, inflight.max_bytes - inflight.bytes,
                             chunk.fresh)
        if watching and run.seqs:
            run = runs.unexpired(run, self.expiry.verdict, now_us)
        if not run.seqs:
            return 0
        count = send_run(self.area.node_id, run.seqs, run.values)
        if count:
            inflight.add_run(run.seqs[:count], run.values[:count], now_us,
                             now_us + self.ack_timeout_us, run.size_of(count),
                             run.sizes if count == len(run.sizes) else run.sizes[:count])
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

    def _others_may_hold(self, lowest: int = 0) -> bool:
        """Whether a message at or past ``lowest`` may be taken by anything but the
        in-flight table (the deletes of an ACK taken in the batch being built are
        mostly below: a pass before the write does not look at each)."""
        return bool(self.ready or self.delayed or self.owed.any_leaving_from(lowest)
                    or self.held.any())

    def _taken_among(self, seqs: list[int]) -> set[int]:
        """Those of ``seqs`` (a read's: ascending) that are ``_taken``, each table
        looked at in one go."""
        taken = self.inflight.among(seqs)
        if seqs and self._others_may_hold(seqs[0]):  # (``min`` compared each: 400 a seq)
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
