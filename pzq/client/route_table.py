"""The route table as a client keeps it: fetched (ROUTES) from any node's monitor, then
from any node it names, so a client given one node follows the cluster as it changes
(docs/cluster.rst, "Partitioned topics"). The table itself is
pzq.client.sessions.routes; this asks the nodes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pzq.client.monitor import request_monitor
from pzq.client.sessions.routes import KnownRoutes
from pzq.errors import EndpointError
from pzq.security import ClientSecurity

REFRESH_TIMEOUT_S = 1.0  # per node, when a client at work asks again


class RouteTable(KnownRoutes):
    def __init__(self, monitors: str | Sequence[str], curve: ClientSecurity | None = None,
                 timeout: float = 5.0, notice: Callable[[str], None] | None = None) -> None:
        """``notice``: told why the first table is late, a second into each node's
        wait (a tool says so rather than wait in silence)."""
        super().__init__(monitors)
        self.curve = curve
        self.timeout = timeout
        self.refresh(notice=notice)

    def refresh(self, timeout: float | None = None,
                notice: Callable[[str], None] | None = None) -> None:
        """Ask the nodes in turn, the one that answered last first, until one answers
        (each within ``timeout`` s, the table's own by default); TimeoutError if none
        does. ``notice``: request_monitor's."""
        tried = []
        for monitor in list(self.monitors):
            try:
                answer = request_monitor(monitor, "ROUTES", timeout or self.timeout, self.curve,
                                         notice)
            except (TimeoutError, EndpointError) as exc:
                tried.append(str(exc))  # it names the monitor
                continue
            refusal = self.answered(monitor, answer, time.monotonic())
            if refusal is None:
                return
            tried.append(f"{monitor}: {refusal}")
        raise TimeoutError("no node answered ROUTES: " + "; ".join(tried))

    def refresh_if_older(self, seconds: float) -> None:
        """Ask again if the table is older than ``seconds``, briefly: a client at work
        keeps the table it has when no node answers now (and is asked again later)."""
        if self.older_than(seconds, time.monotonic()):
            try:
                self.refresh(REFRESH_TIMEOUT_S)
            except TimeoutError:
                self.unanswered(time.monotonic())  # not again at once: the next period
