"""A down node's scheduled copies, released by this node at their time, as a part of
the loop.

While this node has taken a down node over (pzq.cluster.takeover), the poll waits at
most until the earliest due copy it is first in line for (pzq.cluster.
scheduled_takeover); a wake at or past it makes each due copy, up to RELEASE_PER_WAKE,
a new message of this node's, as its own scheduled messages are released
(pzq.node.release), in the same batch as the copy goes and the tombstone and removes
that tell the origin and the other holders. From then on it is an ordinary message
here, delivered to this node's groups of its topic. The origin's clock decided the
due time (it travels with the copy); this node's clock says when it is reached.
"""

from __future__ import annotations

from pzq.clock import Now
from pzq.cluster.lone import TakenCopies
from pzq.node.release import RELEASE_PER_WAKE, Releaser, wait_ms
from pzq.parts import Part
from pzq.store.batch import Batch
from pzq.zmqio import Events


class CopyRelease(Part):
    def __init__(self, copies: TakenCopies, releaser: Releaser) -> None:
        self.copies = copies
        self.releaser = releaser

    def timeout_ms(self, now: Now) -> int | None:
        return wait_ms(self.copies.next_due_us(), now)

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        due = self.copies.next_due_us()
        if due is None or due > now.wall_us:
            return
        for copy in self.copies.due(now.wall_us, RELEASE_PER_WAKE):
            self.copies.release(batch, copy)
            self.releaser.release(batch, copy.value, now)
