"""One line when a node stops answering the exporter, and one when it answers again.

Prometheus sees only ``pzq_up 0``; the reason (nothing listens, a refused CURVE key,
a wrong server key) is on ``/api/stats`` and the status page, and here, in the
exporter's own log, once per change rather than once per scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pzq.client.monitor import StatsAnswer


class NodeStates:
    """Whether each node answered last time; ``tell`` gets a line at each change (a
    node's first answer is told only when it is no answer)."""

    def __init__(self, tell: Callable[[str], None]) -> None:
        self.tell = tell
        self._up: dict[str, bool] = {}
        self._lock = threading.Lock()  # scrapes and the history sampler run at once

    def note(self, answer: StatsAnswer, node: str) -> None:
        with self._lock:
            was = self._up.get(answer.dsn)
            self._up[answer.dsn] = answer.up
        if was == answer.up or (was is None and answer.up):
            return
        named = answer.dsn if node == answer.dsn else f"node {node} ({answer.dsn})"
        if answer.up:
            self.tell(f"{named} answers again")
        else:
            self.tell(f"{named} does not answer: {answer.error}")
