"""Ask every node for STATS at once, each within its own timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

import zmq

from pzq.client.monitor import StatsAnswer, fetch_stats
from pzq.monitoring.node_states import NodeStates
from pzq.security import ClientSecurity

MAX_THREADS = 32
CONCURRENT_SCRAPES = 3  # Prometheus, the history sampler and a page, at the same time
STOPPING = "the exporter is stopping"


class Scraper:
    """Scrapes a fixed list of monitor endpoints in parallel and remembers their node ids.

    A node that does not answer keeps the id it last answered with, so its series keep
    their ``node`` label while it is down. The requests use a context of the scraper's
    own: ``close`` terminates it, which ends every wait for a node at once.
    """

    def __init__(self, dsns: Sequence[str], timeout: float,
                 curve: ClientSecurity | None = None,
                 states: NodeStates | None = None) -> None:
        self.dsns = list(dsns)
        self.states = states
        self.timeout = timeout
        self.curve = curve
        self.node_ids: dict[str, str] = {}
        workers = min(MAX_THREADS, CONCURRENT_SCRAPES * len(self.dsns)) or 1
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="pzq-scrape")
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._closed = threading.Event()

    def scrape(self, timeout: float | None = None) -> list[StatsAnswer]:
        """Every node's answer, in ``dsns`` order; takes about one timeout at most
        (``timeout``, when given, instead of the scraper's)."""
        waits = [self.timeout if timeout is None else timeout] * len(self.dsns)
        try:
            answers = list(self._pool.map(self._fetch, self.dsns, waits))
        except RuntimeError:  # the pool is shut down: closed while this began
            if not self._closed.is_set():
                raise
            return [StatsAnswer(dsn, None, STOPPING) for dsn in self.dsns]
        for answer in answers:
            self._note_id(answer)
        return answers

    def scrape_each(self) -> Iterator[StatsAnswer]:
        """Every node's answer as it comes, so a node that answers is not kept waiting
        for one that times out."""
        try:
            asked = [self._pool.submit(self._fetch, dsn) for dsn in self.dsns]
        except RuntimeError:  # the pool is shut down: closed while this began
            if not self._closed.is_set():
                raise
            return
        for done in as_completed(asked):
            if done.cancelled():  # closed before it began: nothing more is wanted
                continue
            answer = done.result()
            self._note_id(answer)
            yield answer

    def _note_id(self, answer: StatsAnswer) -> None:
        if answer.stats and "node_id" in answer.stats:
            self.node_ids[answer.dsn] = str(answer.stats["node_id"])
        if self.states is not None and answer.error != STOPPING:
            self.states.note(answer, self.node_id(answer.dsn))

    def node_id(self, dsn: str) -> str:
        """The node's id, kept while it is down; its endpoint until it first answers
        (an alert on its ``node`` label named no node at all)."""
        return self.node_ids.get(dsn, dsn)

    def _fetch(self, dsn: str, timeout: float | None = None) -> StatsAnswer:
        try:
            return fetch_stats(dsn, self.timeout if timeout is None else timeout, self.curve,
                               context=self._context)
        except zmq.ZMQError:
            if not self._closed.is_set():
                raise
            return StatsAnswer(dsn, None, STOPPING)  # the context was terminated

    def close(self) -> None:
        """Stop at once: waits for a node under way end now, none starts after."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._context.term()  # returns once each waiting request closed its socket
