"""The route table as a client keeps it: fetched (ROUTES) from any node's monitor, then
from any node it names, so a client given one node follows the cluster as it changes
(docs/cluster.rst, "Partitioned topics")."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from pzq.client.monitor import request_monitor
from pzq.errors import EndpointError
from pzq.security import ClientCurve

REFRESH_TIMEOUT_S = 1.0  # per node, when a client at work asks again


class RouteTable:
    def __init__(self, monitors: str | Sequence[str], curve: ClientCurve | None = None,
                 timeout: float = 5.0) -> None:
        self.monitors = [monitors] if isinstance(monitors, str) else list(monitors)
        if not self.monitors:
            raise ValueError("a route table needs at least one node's monitor endpoint")
        self.curve = curve
        self.timeout = timeout
        self.nodes: dict[str, dict[str, Any]] = {}  # cluster endpoint -> state, endpoints
        self.topics: dict[str, dict[str, Any]] = {}  # topic -> partitions, owners
        self.fetched = 0.0  # monotonic seconds of the last answer
        self.refresh()

    def refresh(self, timeout: float | None = None) -> None:
        """Ask the nodes in turn, the one that answered last first, until one answers
        (each within ``timeout`` s, the table's own by default); TimeoutError if none
        does."""
        tried = []
        for monitor in list(self.monitors):
            try:
                answer = request_monitor(monitor, "ROUTES", timeout or self.timeout, self.curve)
            except (TimeoutError, EndpointError) as exc:
                tried.append(str(exc))  # it names the monitor
                continue
            if answer.startswith(b"ERROR"):
                tried.append(f"{monitor}: {answer.decode(errors='replace')}")
                continue
            self._take(json.loads(answer))
            self.monitors.remove(monitor)
            self.monitors.insert(0, monitor)
            return
        raise TimeoutError("no node answered ROUTES: " + "; ".join(tried))

    def _take(self, table: dict[str, Any]) -> None:
        self.nodes, self.topics = table["nodes"], table["topics"]
        self.fetched = time.monotonic()
        for node in self.nodes.values():  # every node can answer the next time
            monitor = node.get("monitor")
            if monitor and monitor not in self.monitors:
                self.monitors.append(monitor)

    def refresh_if_older(self, seconds: float) -> None:
        """Ask again if the table is older than ``seconds``, briefly: a client at work
        keeps the table it has when no node answers now (and is asked again later)."""
        if time.monotonic() - self.fetched >= seconds:
            try:
                self.refresh(REFRESH_TIMEOUT_S)
            except TimeoutError:
                self.fetched = time.monotonic()  # not again at once: the next period

    def partitions(self, topic: str) -> int:
        """The topic's partition count (0: not partitioned)."""
        return int(self.topics.get(topic, {}).get("partitions", 0))

    def owners(self, topic: str) -> list[str]:
        """The nodes owning at least one partition, each once."""
        return list(dict.fromkeys(self.topics.get(topic, {}).get("owners", [])))

    def endpoint(self, node: str, role: str) -> str | None:
        found = self.nodes.get(node, {}).get(role)
        return str(found) if found else None

    def every(self, role: str, live: bool = False) -> list[str]:
        """Every node's endpoint for ``role`` (producers: ``receive``; groups:
        ``consume``); ``live``: only of the nodes the answering node counts alive."""
        return [str(node[role]) for node in self.nodes.values() if node.get(role)
                and (not live or node.get("state") in ("self", "up"))]
