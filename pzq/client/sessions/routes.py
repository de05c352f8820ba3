"""The route table as a client keeps it, without I/O: the ROUTES answer of any node's
monitor (docs/cluster.rst, "Partitioned topics"), the nodes to ask next time (the one
that answered first, then every node the table names), and when it was taken.

A shell asks the nodes in turn and gives each answer to ``answered``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


class KnownRoutes:
    """Nodes by cluster endpoint (state, client endpoints by role) and topics
    (partitions, owners), as the last answer had them; ``fetched``: when (monotonic
    seconds; 0: never)."""

    def __init__(self, monitors: str | Sequence[str]) -> None:
        self.monitors = [monitors] if isinstance(monitors, str) else list(monitors)
        if not self.monitors:
            raise ValueError("a route table needs at least one node's monitor endpoint")
        self.nodes: dict[str, dict[str, Any]] = {}  # cluster endpoint -> state, endpoints
        self.topics: dict[str, dict[str, Any]] = {}  # topic -> partitions, owners
        self.fetched = 0.0

    def answered(self, monitor: str, answer: bytes, now: float) -> str | None:
        """``monitor``'s answer to ROUTES at ``now``: None once the table is taken from
        it, or what the node said instead (an ERROR)."""
        if answer.startswith(b"ERROR"):
            return answer.decode(errors="replace")
        table = json.loads(answer)
        self.nodes, self.topics = table["nodes"], table["topics"]
        self.fetched = now
        self.monitors.remove(monitor)
        self.monitors.insert(0, monitor)  # it answers first next time
        for node in self.nodes.values():  # every node can answer the next time
            found = node.get("monitor")
            if found and found not in self.monitors:
                self.monitors.append(found)
        return None

    def unanswered(self, now: float) -> None:
        """No node answered at ``now``: the table stays as it is, and is not asked
        for again before its period."""
        self.fetched = now

    def older_than(self, seconds: float, now: float) -> bool:
        """Asked for ``seconds`` or longer before ``now`` (monotonic seconds)."""
        return now - self.fetched >= seconds

    def partitions(self, topic: str) -> int:
        """The topic's partition count (0: not partitioned)."""
        return int(self.topics.get(topic, {}).get("partitions", 0))

    def owners(self, topic: str) -> list[str]:
        """The nodes owning at least one partition, each once."""
        return list(dict.fromkeys(self.topics.get(topic, {}).get("owners", [])))

    def endpoint(self, node: str, role: str) -> str | None:
        """The endpoint ``node`` serves ``role`` on (``receive``, ``consume``, ...), or
        None when the table does not name it."""
        found = self.nodes.get(node, {}).get(role)
        return str(found) if found else None

    def every(self, role: str, live: bool = False) -> list[str]:
        """Every node's endpoint for ``role`` (producers: ``receive``; groups:
        ``consume``); ``live``: only of the nodes the answering node counts alive."""
        return [str(node[role]) for node in self.nodes.values() if node.get(role)
                and (not live or node.get("state") in ("self", "up"))]
