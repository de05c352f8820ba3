"""What every part of a node with sockets offers the loop, so the loop holds a list of
parts and asks each in turn; a part that is off is not in the list (pzq.node.registry
opens the list from the options).

A part owns its sockets from its opening to ``close``. It names the endpoints it bound
(``bound``), what the loop polls for it at all times (``polled``) and the scheduler's
periods it needs (``ticks``). A wake asks, in this order: what to poll
(``interest``) and how long at most (``timeout_ms``); the timer's reasons
(``on_ticks``); what waits on its sockets, into the wake's one store batch
(``take``); after the write, what it sends (``send_out``); last, questions it answers
(``answer``). ``figures`` adds its sections to STATS. Each method does nothing unless
a part has something to do then.
"""

from __future__ import annotations

import zmq

from pzq.clock import Now
from pzq.store.batch import Batch
from pzq.zmqio import Events, Socket

# The scheduler's reasons to wake the loop (pzq.node.waker), given to ``on_ticks``:
REAP = b"R"  # collect expired deliveries
HEARTBEAT = b"H"  # ping the cluster's peers
RETENTION = b"T"  # delete archive segments past --retain-hours
RELAY_POLL = b"P"  # push new archive records to ZPER relay clients

Figures = dict[str, object]


class Part:
    def bound(self) -> dict[str, Socket]:
        """The endpoints this part bound, by the name node_ready gives them."""
        return {}

    def polled(self) -> list[Socket | int]:
        """What the loop polls for input at every wake (the rest: ``interest``)."""
        return []

    def ticks(self) -> dict[bytes, int]:
        """The scheduler's wake-ups this part needs: reason -> period in µs."""
        return {}

    def start(self, now: Now) -> None:
        """Once, before the first wake."""

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

    def backlogged(self) -> bool:
        """Consumers are connected and stored messages wait for them (the loop then
        paces the producers' intake: pzq.node.device)."""
        return False

    def figures(self, now: Now) -> Figures:
        """Sections of STATS: a section two parts share (``zper``) is merged."""
        return {}

    def close(self) -> None:
        """Close the part's sockets (the loop has stopped)."""


def merge_figures(into: Figures, more: Figures) -> None:
    """A part's sections into STATS; a section that is there already (two ZPER parts'
    ``zper``) gets the part's keys beside its own."""
    for section, value in more.items():
        there = into.get(section)
        if isinstance(there, dict) and isinstance(value, dict):
            there.update(value)
        else:
            into[section] = value
