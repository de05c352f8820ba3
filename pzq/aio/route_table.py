"""The route table as an asyncio client keeps it: pzq.client.sessions.routes's
KnownRoutes, filled by asking the nodes' monitors without blocking the loop (the
sync form: pzq.client.route_table)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pzq.aio.monitor import request_monitor
from pzq.client.route_table import REFRESH_TIMEOUT_S
from pzq.client.sessions.routes import KnownRoutes
from pzq.errors import EndpointError
from pzq.security import ClientSecurity


class RouteTable(KnownRoutes):
    """Asked for at the routing client's first call (``refresh``), then as its
    session says."""

    def __init__(self, monitors: str | Sequence[str], curve: ClientSecurity | None = None,
                 timeout: float = 5.0) -> None:
        super().__init__(monitors)
        self.curve = curve
        self.timeout = timeout

    async def refresh(self, timeout: float | None = None) -> None:
        """Ask the nodes in turn, the one that answered last first, until one answers
        (each within ``timeout`` s, the table's own by default); TimeoutError if none
        does."""
        tried = []
        for monitor in list(self.monitors):
            try:
                answer = await request_monitor(monitor, "ROUTES", timeout or self.timeout,
                                               self.curve)
            except (TimeoutError, EndpointError) as exc:
                tried.append(f"{monitor}: {exc}")
                continue
            refusal = self.answered(monitor, answer, time.monotonic())
            if refusal is None:
                return
            tried.append(f"{monitor}: {refusal}")
        raise TimeoutError("no node answered ROUTES: " + "; ".join(tried))

    async def refresh_if_older(self, seconds: float) -> None:
        """Ask again if the table is older than ``seconds``, briefly: a client at work
        keeps the table it has when no node answers now (asked again next period)."""
        if self.older_than(seconds, time.monotonic()):
            try:
                await self.refresh(REFRESH_TIMEOUT_S)
            except TimeoutError:
                self.unanswered(time.monotonic())

    async def known(self) -> None:
        """Asked for once, if it never was."""
        if not self.fetched:
            await self.refresh()
