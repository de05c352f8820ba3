"""Expired messages swept, as a part of the loop, before any delivery of the wake.

The poll waits at most until the earliest expiry in the index (pzq.delivery.expiry);
a wake at or past it reads the index from its start up to now, SWEEP_PER_WAKE keys at
most, and hands each expired message to ``default`` and to every named group of its
topic: each that holds it lets it go (to the dead letters, or deleted on a topic with
``on_expire=drop``) with the next batch, and one that has it out at a consumer keeps
it (its ACK is accepted). The message's index key stays until it has left the store
(looked at on the reaper's tick), so a restart sweeps again what is left.

A topic's ``max_age`` needs no index: own messages are stored in time order, so for
each max_age the topics have, one walk of the own messages from where it stopped
last goes on while they are older than that age, and hands those of the topics of
that age to their groups the same way (a scheduled message released late has an
older stored time than its neighbours: the check at delivery finds it, if this walk
has passed it).
"""

from __future__ import annotations

from functools import partial

from pzq.agenda import Agenda
from pzq.clock import Now, poll_ms
from pzq.delivery.expiry import FAR, MessageExpiry
from pzq.delivery.state import DeliveryState
from pzq.parts import REAP, Part
from pzq.serving.named_groups import NamedGroups
from pzq.store import record
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import Topic, Topics
from pzq.zmqio import Events

SWEEP_PER_WAKE = 1000  # a burst of expiries cannot stall a wake
LONGEST_WAIT_MS = 60_000  # asked again at least this often (a wall clock set forward)


class ExpirySweep(Part):
    def __init__(self, expiry: MessageExpiry, store: Store, topics: Topics,
                 default: DeliveryState, named: NamedGroups) -> None:
        self.expiry = expiry
        self.store = store
        self.topics = topics
        self.default = default
        self.named = named
        self._look_gone = False  # the reaper's tick: lingering messages that left go
        self._aged_from: dict[int, int] = {}  # a max_age (µs) -> the seq its walk goes on
        self._next_aged_us = 0  # when the next message becomes too old (0: look now)
        self._ages: frozenset[int] = frozenset()  # the topics' max_ages at the last walk

    # told when an expiry comes sooner or the topics' max ages change (pzq.agenda)
    tells_wait = True

    def join(self, agenda: Agenda) -> None:
        self.agenda = agenda
        self.expiry.on_sooner = self.topics.on_ages = partial(agenda.changed_at, self, "take")

    def timeout_ms(self, now: Now) -> int | None:
        soonest = self.expiry.soonest_us
        if self.topics.age_limit_us:
            soonest = min(soonest, self._next_aged_us)
        if soonest >= FAR:
            return None
        if soonest <= now.wall_us:
            self.agenda.ask(self, "take")  # due: this wake sweeps
        return min(LONGEST_WAIT_MS, poll_ms(max(0, soonest - now.wall_us) / 1e6))

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if REAP in reasons:
            self._look_gone = True
            self.agenda.ask(self, "take")

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        """The wake's sweep; asked only while something may be due (its rest else)."""
        self._sweep(batch, now)
        wall = now.wall_us
        if not self._look_gone and wall < self.expiry.soonest_us and not (
                self.topics.age_limit_us and (wall >= self._next_aged_us
                                              or self.topics.max_ages != self._ages)):
            self.agenda.rest(self, "take")  # asked again by its wait or a change
        self.agenda.changed(self)  # what it swept moves its wait

    def _sweep(self, batch: Batch, now: Now) -> None:
        if self._look_gone:
            self._look_gone = False
            self.expiry.gone(batch)
        if self.topics.age_limit_us and (now.wall_us >= self._next_aged_us
                                         or self.topics.max_ages != self._ages):
            self._sweep_aged(now.wall_us)
        if now.wall_us < self.expiry.soonest_us:
            return
        for key, seq in self.expiry.due(now.wall_us, SWEEP_PER_WAKE):
            value = self.store.get_own(seq)
            if value is None:  # acked, or gone otherwise, before it expired
                batch.delete(key)
                continue
            topic = self.topics.describe(value)[0]
            fate = self.expiry.fate(topic)
            for state in self._states(topic):
                state.expire(seq, value, fate)
            self.expiry.lingering.add(seq)

    def _sweep_aged(self, now_us: int) -> None:
        """For each max_age the topics have, the own messages older than it, from
        where its walk stopped, SWEEP_PER_WAKE at most; the loop wakes again when the
        first younger one becomes too old."""
        ages = self._ages = self.topics.max_ages
        self._next_aged_us = FAR
        for age_us in ages:
            start = self._aged_from.get(age_us, 0)
            chunk = self.store.read_own(start, SWEEP_PER_WAKE)
            # past the end, the next to age is one stored from now on
            next_us = now_us if len(chunk) == SWEEP_PER_WAKE else now_us + age_us
            for seq, value in chunk:
                stored_us = record.stored_us_of(value)
                if stored_us > now_us - age_us:  # younger: the rest are too
                    next_us = stored_us + age_us
                    break
                start = seq + 1
                topic = self.topics.describe(value)[0]
                if topic.max_age_us == age_us:
                    for state in self._states(topic):
                        state.expire(seq, value, self.expiry.fate(topic))
            self._aged_from[age_us] = start
            self._next_aged_us = min(self._next_aged_us, next_us)

    def _states(self, topic: Topic) -> list[DeliveryState]:
        """``default``'s and the topic's named groups' (each knows whether it holds it)."""
        groups = self.named.groups
        return [self.default, *(groups[group.id].state for group in topic.groups.values()
                                if group.id in groups)]

    def figures(self, now: Now) -> dict[str, object]:
        soonest = self.expiry.soonest_us
        return {"next_expiry_us": 0 if soonest >= FAR else soonest,
                "expired_lingering": len(self.expiry.lingering)}
