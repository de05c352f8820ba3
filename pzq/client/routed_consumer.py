"""A consumer of one group of a topic across a cluster: one ``GroupConsumer`` per node
that serves the group (every node in the route table: owners deliver their partitions,
a survivor what it took over), each with its own credits. A delivery's ACK goes back to
the node it came from (``Message.ack`` knows its consumer). Nodes that join the table
later are joined as the table is asked again.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import zmq

from pzq.client.consumer import Message
from pzq.client.group_consumer import GroupConsumer
from pzq.client.route_table import RouteTable
from pzq.security import ClientCurve
from pzq.zmqio import Context

REFRESH_S = 2.0  # how often the table is asked for nodes not yet joined


class RoutedGroupConsumer:
    def __init__(self, routes: str | Sequence[str] | RouteTable, topic: str, group: str,
                 window: int = 100, context: Context | None = None,
                 curve: ClientCurve | None = None, **options: Any) -> None:
        self.table = routes if isinstance(routes, RouteTable) else RouteTable(routes, curve)
        self.topic, self.group, self.window = topic, group, window
        self.curve = curve
        # GroupConsumer's: filter, start, confirm, ...; each node makes the group when it
        # has none (a group lives on each node), and a node that is down is not waited for
        self.options = {"declare": True, "timeout": 3.0, **options}
        self._context = context or zmq.Context.instance()
        self.consumers: dict[str, GroupConsumer] = {}  # consume endpoint -> consumer
        self._turn = 0
        self._join_new()
        if not self.consumers:
            raise ValueError("no node in the route table has a consume endpoint "
                             "(--consume-dsn)")

    def _join_new(self) -> None:
        for endpoint in self.table.every("consume"):
            if endpoint not in self.consumers:
                try:
                    self.consumers[endpoint] = GroupConsumer(
                        endpoint, self.topic, self.group, self.window,
                        context=self._context, curve=self.curve, **self.options)
                except TimeoutError:
                    pass  # a node that is down now: joined when it answers again

    def receive(self, timeout: float | None = None) -> Message | None:
        found = self.receive_many(1, timeout)
        return found[0] if found else None

    def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries from any node: waits up to ``timeout`` s for the
        first, then takes what has arrived, each node in turn."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if time.monotonic() - self.table.fetched >= REFRESH_S:
                self.table.refresh_if_older(REFRESH_S)
                self._join_new()
            found = self._take_arrived(most)
            if found:
                return found
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            self._wait(REFRESH_S if left is None else min(left, REFRESH_S))

    def _take_arrived(self, most: int) -> list[Message]:
        consumers = list(self.consumers.values())
        self._turn = (self._turn + 1) % len(consumers)
        found: list[Message] = []
        for consumer in consumers[self._turn:] + consumers[:self._turn]:
            if len(found) >= most:
                break
            found += consumer.receive_many(most - len(found), 0)
        return found

    def _wait(self, seconds: float) -> None:
        poller = zmq.Poller()
        for consumer in self.consumers.values():
            poller.register(consumer.socket, zmq.POLLIN)
        poller.poll(max(1, int(seconds * 1000)))

    def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries: one ACK per node they came from."""
        by_node: dict[int, list[Message]] = defaultdict(list)
        consumers = {id(consumer): consumer for consumer in self.consumers.values()}
        for message in messages:
            by_node[id(message._consumer)].append(message)
        for key, group in by_node.items():
            consumers[key].ack_many(group)

    def close(self) -> None:
        for consumer in self.consumers.values():
            consumer.close()

    def __enter__(self) -> RoutedGroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
