"""The last minutes of every node, sampled in a thread, so a fresh status page has a past.

Each sample keeps the backlog (stored, in flight) and the rates since the previous
sample (received, delivered, acked per second), from the nodes' counters (a group's
rates are the node's own, in its answer). A node that does not answer gets an empty
point, and is DOWN since its first failed sample. Each node's answer is kept as it
comes: one that answers at once shows while another's timeout runs. A node with no
point yet has not been asked to the end: the page shows it as waiting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pzq.client.monitor import StatsAnswer
from pzq.monitoring.scrape import Scraper

RATE_COUNTERS = ("received", "delivered", "acked")
LEVELS = (("stored", "messages"), ("inflight", "messages_inflight"))


@dataclass
class NodeHistory:
    dsn: str
    points: deque[dict[str, float | None]]
    stats: dict[str, Any] | None = None  # the latest answer
    error: str | None = None  # why the latest sample has no answer
    down_since: float | None = None  # wall clock of the first failed sample in a row
    last_up: float | None = None
    previous: tuple[float, dict[str, Any]] | None = field(default=None, repr=False)

    def record(self, answer: StatsAnswer, now: float) -> None:
        point: dict[str, float | None] = {"t": round(now, 3)}
        if answer.stats is None:
            self.error = answer.error
            if self.down_since is None:
                self.down_since = now
            self.previous = None
            point.update({name: None for name, _ in LEVELS})
            point.update({name: None for name in RATE_COUNTERS})
        else:
            self.stats, self.error, self.down_since, self.last_up = answer.stats, None, None, now
            point.update({name: answer.stats.get(key) for name, key in LEVELS})
            point.update(self._rates(answer.stats, now))
            self.previous = (now, answer.stats)
        self.points.append(point)

    def _rates(self, stats: dict[str, Any], now: float) -> dict[str, float | None]:
        """Per second since the previous sample; none across a restart or a gap."""
        if self.previous is None or now <= self.previous[0]:
            return {name: None for name in RATE_COUNTERS}
        then, before = self.previous
        restarted = stats.get("uptime_seconds", 0) < before.get("uptime_seconds", 0)
        return {name: None if restarted or stats.get(name, 0) < before.get(name, 0)
                else round((stats.get(name, 0) - before.get(name, 0)) / (now - then), 3)
                for name in RATE_COUNTERS}

    def as_json(self, node_id: str) -> dict[str, Any]:
        return {"monitor": self.dsn, "node_id": node_id, "up": self.stats is not None
                and self.error is None, "error": self.error, "down_since": self.down_since,
                "last_up": self.last_up, "stats": self.stats, "points": list(self.points)}


class History:
    """Samples every node each ``interval_s`` and keeps ``keep_s`` seconds of points."""

    def __init__(self, scraper: Scraper, interval_s: float, keep_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.scraper = scraper
        self.interval_s = interval_s
        self.keep_s = keep_s
        self.clock = clock
        self.started = clock()  # wall clock: since when the page waits for a first answer
        length = max(1, int(keep_s / interval_s))
        self.nodes = {dsn: NodeHistory(dsn, deque(maxlen=length)) for dsn in scraper.dsns}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, answers: list[StatsAnswer], now: float) -> None:
        with self._lock:
            for answer in answers:
                self.nodes[answer.dsn].record(answer, now)

    def sample(self) -> None:
        """Every node once; each answer is recorded when it comes, at the time asked."""
        asked = self.clock()
        for answer in self.scraper.scrape_each():
            self.record([answer], asked)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"interval_seconds": self.interval_s, "keep_seconds": self.keep_s,
                    "now": round(self.clock(), 3), "started": round(self.started, 3),
                    "timeout_seconds": self.scraper.timeout,
                    "nodes": [node.as_json(self.scraper.node_id(dsn))
                              for dsn, node in self.nodes.items()]}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pzq-history", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            self.sample()
            # The sampling period; an Event so that stop() ends it at once.
            if self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started))):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
