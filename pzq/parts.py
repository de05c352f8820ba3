"""What every part of a node with sockets offers the loop, so the loop holds a list of
parts and asks each in turn; a part that is off is not in the list.

A wake asks, in this order: what to poll (``interest``) and how long at most
(``timeout_ms``); the timer's reasons (``on_ticks``); what waits on its sockets, into
the wake's one store batch (``take``); after the write, what it sends (``send_out``);
last, questions it answers (``answer``). Each method does nothing unless a part has
something to do then.
"""

from __future__ import annotations

import zmq

from pzq.clock import Now
from pzq.store.store import Batch
from pzq.zmqio import Events

# The scheduler's reasons to wake the loop (pzq.node.waker), given to ``on_ticks``:
REAP = b"R"  # collect expired deliveries
HEARTBEAT = b"H"  # ping the cluster's peers
RETENTION = b"T"  # delete archive segments past --retain-hours
RELAY_POLL = b"P"  # push new archive records to ZPER relay clients


class Part:
    def interest(self, poller: zmq.Poller, now: Now, delivering: bool) -> None:
        """Register what to poll (``delivering``: the node is not stopping)."""

    def timeout_ms(self, now: Now) -> int | None:
        """Wake at the latest after this long (None: only on events)."""
        return None

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        """The scheduler's reasons for this wake (pzq.node.waker)."""

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        """What waits, into the wake's batch."""

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        """After the batch is written."""

    def answer(self, events: Events, now: Now) -> None:
        """Questions and figures, last in a wake."""
