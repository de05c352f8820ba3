"""Ask every node for STATS at once, each within its own timeout."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pzq.client.monitor import StatsAnswer, fetch_stats
from pzq.security import ClientCurve

MAX_THREADS = 32
CONCURRENT_SCRAPES = 3  # Prometheus, the history sampler and a page, at the same time


class Scraper:
    """Scrapes a fixed list of monitor endpoints in parallel and remembers their node ids.

    A node that does not answer keeps the id it last answered with, so its series keep
    their ``node`` label while it is down.
    """

    def __init__(self, dsns: Sequence[str], timeout: float,
                 curve: ClientCurve | None = None) -> None:
        self.dsns = list(dsns)
        self.timeout = timeout
        self.curve = curve
        self.node_ids: dict[str, str] = {}
        workers = min(MAX_THREADS, CONCURRENT_SCRAPES * len(self.dsns)) or 1
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="pzq-scrape")

    def scrape(self) -> list[StatsAnswer]:
        """Every node's answer, in ``dsns`` order; takes about one timeout at most."""
        answers = list(self._pool.map(self._fetch, self.dsns))
        for answer in answers:
            if answer.stats and "node_id" in answer.stats:
                self.node_ids[answer.dsn] = str(answer.stats["node_id"])
        return answers

    def node_id(self, dsn: str) -> str:
        return self.node_ids.get(dsn, "")

    def _fetch(self, dsn: str) -> StatsAnswer:
        return fetch_stats(dsn, self.timeout, self.curve)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
