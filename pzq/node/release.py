"""Scheduled messages released when due, as a part of the loop.

The poll waits at most until the earliest due time (pzq.store.scheduled keeps it);
a wake at or past it moves what is due, up to RELEASE_PER_WAKE, into the wake's
batch as new own messages of their topics (a fresh seq each, so every group's cursor
meets them in due-time order, then arrival order), and deletes their scheduled keys
in the same batch: a crash before the write leaves them scheduled, after it
released, never both. Once written they are copied to the peers as new messages
are, and the peers holding a copy of the scheduled message drop it (a remove, owed
until each confirms). The owner's clock decides: a message is due when this node's
wall clock says so. After a start the node releases nothing until its peers said
which of its messages they took over (as it delivers nothing until then): one a
survivor released while this node was down is dropped here, not released again.
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.agenda import Agenda
from pzq.clock import Now, poll_ms
from pzq.delivery.expiry import DEAD, MessageExpiry
from pzq.delivery.lanes import Lanes
from pzq.parts import Figures, Part
from pzq.protocol.time_headers import message_times
from pzq.store import record
from pzq.store.batch import Batch, Participant
from pzq.store.scheduled import ScheduledArea
from pzq.store.store import Store
from pzq.store.topics import Topics
from pzq.zmqio import Events

RELEASE_PER_WAKE = 1000  # a burst of due messages cannot stall a wake
LONGEST_WAIT_MS = 60_000  # asked again at least this often (a wall clock set forward)
HELD_BACK_MS = 100  # while the peers have not said what they took over after a start

Requeued = Callable[[Batch, int, bytes], None]  # a new own message into its topic's log
Copied = Callable[[list[tuple[int, bytes]], float], None]  # new own messages to the peers
Removed = Callable[[int], None]  # an own scheduled message gone: its copies on peers go
Allowed = Callable[[float], bool]  # whether own messages may go out yet (monotonic now)


def wait_ms(due_us: int | None, now: Now) -> int | None:
    if due_us is None:
        return None
    return min(LONGEST_WAIT_MS, poll_ms(max(0, due_us - now.wall_us) / 1e6))


class Releaser(Participant):
    """A scheduled record made a new own message of its topic, copied to the peers
    once written; or, expired already (its TTL counts from when it was stored), sent
    to the dead letters or nowhere, as its topic says."""

    def __init__(self, store: Store, into_topic: Requeued, copy: Copied,
                 expiry: MessageExpiry, lanes: Lanes, topics: Topics) -> None:
        self.into_topic = into_topic
        self.copy = copy
        self.expiry = expiry
        self.lanes = lanes
        self.topics = topics
        self._released: list[tuple[int, bytes]] = []  # seq, record: in the batch
        self._mono = 0.0
        self.released = 0  # since start
        self.idle = True  # (Participant) until a release in the batch being built
        store.register(self)

    def release(self, batch: Batch, value: bytes, now: Now) -> None:
        self._mono = now.mono
        stored_us = record.stored_us_of(value)
        fate = self.expiry.verdict_of(value, now.wall_us)
        if fate:
            dead_seq = batch.add_dead_letter(value) if fate == DEAD else 0
            self.expiry.expired_final(batch, dead_seq, value, fate == DEAD)
            return
        seq = batch.add_message(value)
        self.into_topic(batch, seq, value)
        times = message_times(record.headers_of(value), stored_us)
        if times.expires_us:
            self.expiry.track(batch, times.expires_us, seq)
        topic = self.topics.describe(value)[0]
        if times.priority and topic.priorities:
            self.lanes.add(batch, topic, times.priority, seq)
        self._released.append((seq, value))
        self.idle = False

    def written(self) -> None:
        released, self._released = self._released, []
        self.idle = True
        if released:
            self.released += len(released)
            self.copy(released, self._mono)

    def failed(self) -> None:
        self._released = []  # still scheduled: released again at the next wake
        self.idle = True


class ScheduledRelease(Part):
    """This node's own scheduled messages, released when due. Its wait is asked when a
    batch changed the scheduled times, and when it comes (pzq.agenda)."""

    tells_wait = True

    def __init__(self, area: ScheduledArea, releaser: Releaser, removed: Removed,
                 allowed: Allowed) -> None:
        self.area = area
        self.releaser = releaser
        self.removed = removed
        self.allowed = allowed

    def join(self, agenda: Agenda) -> None:
        self.agenda = agenda
        self.area.on_change = self._changed
        self._changed()

    def _changed(self) -> None:
        """A batch changed the scheduled times: the wait asked again, and the take
        asked only while any waits (the common wake has none)."""
        self.agenda.changed(self)
        if self.area.counts:
            self.agenda.ask(self, "take")
        else:
            self.agenda.rest(self, "take")

    def timeout_ms(self, now: Now) -> int | None:
        wait = wait_ms(self.area.next_due_us(), now)
        if wait is not None and not self.allowed(now.mono):
            return max(wait, HELD_BACK_MS)  # the peers' word first: asked again soon
        return wait

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        due = self.area.next_due_us()
        if due is None or due > now.wall_us or not self.allowed(now.mono):
            return
        for message in self.area.due(now.wall_us, RELEASE_PER_WAKE):
            self.area.released(batch, message)
            self.removed(message.seq)
            self.releaser.release(batch, message.value, now)

    def figures(self, now: Now) -> Figures:
        due = self.area.next_due_us()
        return {"scheduled": self.area.waiting, "scheduled_released": self.releaser.released,
                "next_due_us": due or 0}
