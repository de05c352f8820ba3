"""The node's own upkeep as a part of the loop, first in a wake: a wake for the store's
timed fsync (--sync-interval), and a new group's older messages backfilled into its
topic's log, a chunk a wake, right after the write. Its wait is asked only when the
log is first written after a sync or a backfill is wanted (pzq.agenda)."""

from __future__ import annotations

from functools import partial

from pzq.agenda import Agenda
from pzq.clock import Now, poll_ms
from pzq.parts import Part
from pzq.store.store import Store
from pzq.store.topics import Topics
from pzq.zmqio import Events


class NodeUpkeep(Part):
    tells_wait = True

    def __init__(self, store: Store, topics: Topics) -> None:
        self.store = store
        self.topics = topics

    def join(self, agenda: Agenda) -> None:
        self.agenda = agenda
        self.store.log_sync.on_sooner = partial(agenda.changed, self)
        self.topics.on_backfill = partial(agenda.changed_at, self, "send_out")
        if not self.topics.backfill_due():
            agenda.rest(self, "send_out")  # (the common wake: nothing to backfill)

    def timeout_ms(self, now: Now) -> int | None:
        if self.topics.backfill_due():
            return 0
        sync_wait = self.store.log_sync.wait_s(now.mono)  # from now (its deadline is kept)
        return None if sync_wait is None else poll_ms(sync_wait)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        if self.topics.backfill_due():
            self.topics.backfill()  # a chunk: the wait (0 while more is due) asked again
        if not self.topics.backfill_due():
            self.agenda.rest(self, "send_out")
