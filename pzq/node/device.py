"""The order of one wake. Every part owns its state and its sockets
(pzq.node.registry opens them); this only says what happens when, at the time the
loop read for the wake.

One wake: act on the ticks due (pzq.node.scheduler's jobs) and the waker's reasons; read
everything waiting (bounded) from the cluster, the producers and the consumers into
one store batch, with what those owe the peers; in a wake whose batch holds no new
message nor anything else a send waits for (a drain's: ACKs, and what earlier wakes
left to write), the deliveries first, so that a consumer's next batch does not wait
for the write, and what the takes left for after them (a drain's ACKs' deletes and
marks, which no delivery needs: its next batch does not wait for them either); write
it (or tell the parts it failed); send what the parts owe after the write (producer ACKs,
the cluster's frames, CONFIRM's ACKED, deliveries as the consumers and the window
allow); answer the monitor and the readers.
"""

from __future__ import annotations

import zmq

from pzq import sockets
from pzq.clock import Now
from pzq.errors import PzqError, StoreUnrecoverable
from pzq.node.registry import open_parts
from pzq.node.scheduler import LoopScheduler
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.parts import Figures, Parts
from pzq.security import NodeSecurity
from pzq.zmqio import Context, Events, Socket

# the poll's longest wait: libzmq takes a C int of ms (24.8 days at most), and a tick or
# deadline a --reaper-frequency or --sync-interval of a month away overflowed it
LONGEST_POLL_MS = 3_600_000


class Device:
    """Binds every part that is on, or closes what it bound and raises (BindError).
    ``now``: the time of the opening."""

    def __init__(self, node: NodeState, waker: Waker, context: Context,
                 security: NodeSecurity, now: Now) -> None:
        self.node = node
        self.waker = waker
        self._ticked = waker.fileno()  # (asked at every wake: no call)
        self.stopping = False
        self.parts: Parts = open_parts(node, context, security, now)
        self.timer = LoopScheduler({})  # the parts' ticks, from ``start``

    def bound(self) -> dict[str, str]:
        """The endpoints actually bound (wildcard ports resolved), for node_ready."""
        return {role: sockets.bound_endpoint(socket)
                for role, socket in self.parts.bound().items()}

    def polled(self) -> list[Socket | int]:
        return self.parts.polled()

    def ticks(self) -> dict[bytes, int]:
        """The periodic wake-ups the parts need: reason -> period in µs."""
        return self.parts.ticks()

    def start(self, now: Now) -> None:
        """Before the first wake; the ticks' grids begin here, on the loop's thread."""
        self.timer = LoopScheduler(self.ticks())
        self.timer.start()
        self.parts.start(now)

    def figures(self, now: Now) -> Figures:
        return self.parts.figures(now)

    def close(self) -> None:
        if self.timer.running:
            self.timer.shutdown()
        self.parts.close()

    # -- what to wait for ------------------------------------------------------

    def interest(self, poller: zmq.Poller, now: Now) -> None:
        """Poll for what there is room and work for, so the loop never spins."""
        self.parts.interest(poller, now, not self.stopping)

    def poll_timeout_ms(self, now: Now) -> int | None:
        return self.timer.timeout_ms(now.mono, self.parts.timeout_ms(now))

    # -- one wake ----------------------------------------------------------------

    def one_wake(self, poller: zmq.Poller) -> None:
        """What to poll and how long, the poll, the wake (the loop's turn: the poll
        asked of libzmq directly, as zmq.Poller.poll does)."""
        parts, now = self.parts, Now.read()
        parts.interest(poller, now, not self.stopping)
        timeout = self.timer.timeout_ms(now.mono, parts.wait_ms(now))
        if timeout is None:
            timeout = -1
        elif timeout > LONGEST_POLL_MS:  # a wake early finds nothing due, and waits again
            timeout = LONGEST_POLL_MS
        self.wake(dict(zmq.zmq_poll(poller.sockets, timeout)), Now.read())

    def wake(self, events: Events, now: Now) -> None:
        parts, store = self.parts, self.node.store
        if self._ticked in events or now.mono >= self.timer.soonest:
            # the ticks due (the scheduler's jobs, run here) and what the waker's pipe
            # holds (signals)
            reasons = self.waker.drain() if self._ticked in events else b""
            if now.mono >= self.timer.soonest:
                reasons += self.timer.due()
            if reasons:
                parts.on_ticks(reasons, now)
        batch = store.begin(now.mono)  # (the wake's time: its timed fsync's)
        if parts.take(events, batch, now):  # nothing in it a send waits for
            parts.send_early(events, now, not self.stopping)
        if parts.unsettled:  # what the takes left (mostly nothing): before the write
            parts.settle(events, batch, now)
        try:
            store.commit(batch)
        except StoreUnrecoverable as exc:
            parts.write_failed(str(exc))
            raise  # the node stops: see StoreUnrecoverable
        except PzqError as exc:
            parts.write_failed(str(exc))
        parts.send_out(events, now, not self.stopping)
        parts.answer(events, now)

    # -- stopping ----------------------------------------------------------------

    def owes(self) -> bool:
        """True while something owed is worth a short wait (ACKs waiting for copies)."""
        return self.parts.owes()

    def hand_back(self, seconds: float) -> Figures:
        """Send what is owed, within ``seconds``; what could not be."""
        return self.parts.hand_back(seconds)
