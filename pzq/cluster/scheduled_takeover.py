"""A down node's scheduled copies, released at their time by the node that took it over.

While an origin is taken over (pzq.cluster.takeover: it is down and this node hears a
majority), each of its scheduled copies is released by the first live node of the
copy's holder list, as the origin's other copies are delivered: when it is due by
this node's index (pzq.store.scheduled_copies), the node's release part
(pzq.node.copy_release) makes it a new message of this node's, and here the copy
goes with a tombstone for the origin's return (it then drops its scheduled message,
pzq.store.scheduled) and a remove for the other holders (owed until each confirms,
pzq.cluster.done). Due copies another holder is first in line for are passed over
until the next heartbeat, when who is alive may have changed: no wake reads them
again meanwhile.
"""

from __future__ import annotations

from pzq.cluster.done import Dones
from pzq.cluster.takeover import Takeovers
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.store.batch import Batch
from pzq.store.replicas import ReplicaStore
from pzq.store.scheduled_copies import HeldCopy, ScheduledCopies


class ScheduledTakeover:
    def __init__(self, copies: ScheduledCopies, takeovers: Takeovers,
                 replicas: ReplicaStore, done: Dones) -> None:
        self.copies = copies
        self.takeovers = takeovers
        self.replicas = replicas
        self.done = done
        self._passed: dict[bytes, bytes] = {}  # origin -> the last due key not ours
        self._next: dict[bytes, int | None] = {}  # origin -> its next due µs, as looked up
        self._changes = -1  # the copies' changes when ``_next`` was looked up

    def reset(self) -> None:
        """Who is alive may have changed (a heartbeat): look at passed copies again."""
        self._passed.clear()
        self._next.clear()

    def next_due_us(self) -> int | None:
        """When the next copy this node may have to release is due (one seek per
        origin taken over, after a batch changed the copies)."""
        origins = self.takeovers.active_origins()
        if not origins:
            return None
        if self._changes != self.copies.changes:
            self._changes = self.copies.changes
            self._next.clear()
        for origin in origins:
            if origin not in self._next:
                self._next[origin] = self.copies.next_due_us(origin,
                                                             self._passed.get(origin, b""))
        return min((due for origin in origins if (due := self._next[origin]) is not None),
                   default=None)

    def due(self, now_us: int, limit: int) -> list[HeldCopy]:
        """Up to ``limit`` copies due at ``now_us`` that this node releases."""
        found: list[HeldCopy] = []
        for origin in self.takeovers.active_origins():
            for copy in self.copies.due(origin, now_us, limit - len(found),
                                        self._passed.get(origin, b"")):
                if self.takeovers.serves(origin, copy.seq, copy.holders):
                    found.append(copy)
                else:
                    self._passed[origin] = copy.key
                    self._next.pop(origin, None)
            if len(found) >= limit:
                break
        return found

    def release(self, batch: Batch, copy: HeldCopy) -> None:
        """The copy became a new message here: it goes, a tombstone tells the origin
        when it is back, and the other holders drop theirs."""
        self.copies.released(batch, copy)
        self.replicas.tombstone(batch, copy.origin, copy.seq)
        self.done.taken_over(copy.origin, [copy.seq], DEFAULT_GROUP)
