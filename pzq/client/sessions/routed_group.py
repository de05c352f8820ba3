"""A routed group consumer's session: the nodes it is joined to (every node in the
route table serves the group: owners deliver their partitions, a survivor what it
took over), when the table is asked again for nodes not yet joined, whose turn it is
to be read, which node each delivery's ACK goes back to, and whether a node refused
the group. Without I/O: each member is a consumer shell of one node, with its own
credits; the sync and the asyncio routed consumers share it.

A node that does not answer its join is down for now: tried again at the next
refresh. A node that refuses the group (ConsumeRefused: its right to consume it
withdrawn, another filter, a topic it may not make) refuses the routed consumer,
at its join as at a receive after: the node's words are said then and at every
receive after, and the other nodes' deliveries are not handed out as if nothing had
happened.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

from pzq.client.sessions.delivered import NOT_OWN, M
from pzq.client.sessions.routes import KnownRoutes
from pzq.errors import ConsumeRefused

REFRESH_S = 2.0  # how often the table is asked for nodes not yet joined
C = TypeVar("C")  # a member: the consumer of one node
NO_CONSUME_ENDPOINT = "no node in the route table has a consume endpoint (--consume-dsn)"


class RoutedGroupSession(Generic[C]):
    def __init__(self, routes: KnownRoutes) -> None:
        self.routes = routes
        self.members: dict[str, C] = {}  # consume endpoint -> its consumer
        self._turn = 0
        self.refusal = ""  # a node's words when it refused the group

    def refused(self, refused: ConsumeRefused) -> None:
        """A node refused the group (at its join or later): the routed consumer is
        refused from now on."""
        self.refusal = str(refused)

    def refuse_again(self) -> None:
        """ConsumeRefused with the node's words, once one refused the group."""
        if self.refusal:
            raise ConsumeRefused(self.refusal)

    def check_joined(self) -> None:
        """After the first joins: ValueError when no node in the table was joined
        (none has a consume endpoint, or none answered)."""
        if not self.members:
            raise ValueError(NO_CONSUME_ENDPOINT)

    def table_age(self, now: float) -> float | None:
        """The age past which the table is asked for again now (then ``to_join``);
        None: not yet."""
        return REFRESH_S if self.routes.older_than(REFRESH_S, now) else None

    def to_join(self) -> list[str]:
        """Consume endpoints in the table without a member yet, of the nodes it counts
        alive: a node down at its last try is tried again once the table counts it up,
        not before (each try waits for its answer, holding every other node's
        deliveries back meanwhile)."""
        return [endpoint for endpoint in self.routes.every("consume", live=True)
                if endpoint not in self.members]

    def joined(self, endpoint: str, member: C) -> None:
        self.members[endpoint] = member

    def in_turn(self) -> list[C]:
        """Every member, starting one further each time (none is always read last)."""
        members = list(self.members.values())
        self._turn = (self._turn + 1) % len(members)
        return members[self._turn:] + members[:self._turn]

    def by_member(self, messages: Iterable[M]) -> list[tuple[C, list[M]]]:
        """The deliveries by the member they came from, to answer each in one."""
        members = {id(member): member for member in self.members.values()}
        found: dict[int, list[M]] = {}
        for message in messages:
            found.setdefault(id(message._consumer), []).append(message)
        if not found.keys() <= members.keys():  # (a delivery of another consumer)
            raise ValueError(NOT_OWN)
        return [(members[key], group) for key, group in found.items()]

    def next_deadline(self, now: float) -> float:
        """When the table is due to be asked again."""
        return self.routes.fetched + REFRESH_S
