"""Expired messages swept, as a part of the loop, before any delivery of the wake.

The poll waits at most until the earliest expiry in the index (pzq.delivery.expiry);
a wake at or past it reads the index from its start up to now, SWEEP_PER_WAKE keys at
most, and hands each expired message to ``default`` and to every named group of its
topic: each that holds it lets it go (to the dead letters, or deleted on a topic with
``on_expire=drop``) with the next batch, and one that has it out at a consumer keeps
it (its ACK is accepted). The message's index key stays until it has left the store
(looked at on the reaper's tick), so a restart sweeps again what is left.
"""

from __future__ import annotations

from pzq.clock import Now, poll_ms
from pzq.delivery.expiry import FAR, MessageExpiry
from pzq.delivery.state import DeliveryState
from pzq.parts import REAP, Part
from pzq.serving.named_groups import NamedGroups
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

    def timeout_ms(self, now: Now) -> int | None:
        soonest = self.expiry.soonest_us
        if soonest >= FAR:
            return None
        return min(LONGEST_WAIT_MS, poll_ms(max(0, soonest - now.wall_us) / 1e6))

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if REAP in reasons:
            self._look_gone = True

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        if self._look_gone:
            self._look_gone = False
            self.expiry.gone(batch)
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

    def _states(self, topic: Topic) -> list[DeliveryState]:
        """``default``'s and the topic's named groups' (each knows whether it holds it)."""
        groups = self.named.groups
        return [self.default, *(groups[group.id].state for group in topic.groups.values()
                                if group.id in groups)]

    def figures(self, now: Now) -> dict[str, object]:
        soonest = self.expiry.soonest_us
        return {"next_expiry_us": 0 if soonest >= FAR else soonest,
                "expired_lingering": len(self.expiry.lingering)}
