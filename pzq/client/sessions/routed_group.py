"""A routed group consumer's session: the nodes it is joined to (every node in the
route table serves the group: owners deliver their partitions, a survivor what it
took over), when the table is asked again for nodes not yet joined, whose turn it is
to be read, which node each delivery's ACK goes back to, and whether a node refused
the group. Without I/O: each member is a consumer shell of one node, with its own
credits; the sync and the asyncio routed consumers share it.

The joins go at once, each node's CONSUME beside the others', and the answers are
taken as they come: a node that does not answer (dead, and still counted up by the
table until its peers' --timeout-nodes) holds back no other node's deliveries. One
that has not answered within the join timeout is let go, and tried again at the
next refresh while the table counts it up. The first joins (the constructor, or
``join()`` in pzq.aio) await every node's answer, but not longer than JOIN_GRACE_S
after the first node joined. A node that refuses the group (ConsumeRefused: its right to consume it
withdrawn, another filter, a topic it may not make) refuses the routed consumer,
at its join as at a receive after: the node's words are said then and at every
receive after, and the other nodes' deliveries are not handed out as if nothing had
happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from pzq.client.sessions.delivered import NOT_OWN, M
from pzq.client.sessions.routes import KnownRoutes
from pzq.errors import ConsumeRefused

REFRESH_S = 2.0  # how often the table is asked for nodes not yet joined
# at the first joins, how long the other nodes' answers are awaited once one joined: a
# live node answers within milliseconds (a loaded machine's all alike), and a refusal
# then is the constructor's
JOIN_GRACE_S = 1.0
C = TypeVar("C")  # a member: the consumer of one node
NO_CONSUME_ENDPOINT = "no node in the route table has a consume endpoint (--consume-dsn)"


class RoutedGroupSession(Generic[C]):
    def __init__(self, routes: KnownRoutes, join_timeout: float | None = 3.0) -> None:
        self.routes = routes
        self.join_timeout = join_timeout  # a join unanswered this long is tried again
        self.members: dict[str, C] = {}  # consume endpoint -> its consumer
        # consume endpoint -> its consumer, and when its CONSUME went: not answered yet
        self.joining: dict[str, tuple[C, float]] = {}
        self.first_joined: float | None = None  # when the first member joined
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
        """Consume endpoints in the table without a member or a join on its way, of
        the nodes it counts alive: a node down at its last try is tried again once the
        table counts it up, not before."""
        return [endpoint for endpoint in self.routes.every("consume", live=True)
                if endpoint not in self.members and endpoint not in self.joining]

    def join_sent(self, endpoint: str, member: C, now: float) -> None:
        """``member``'s CONSUME went at ``now``: its answer is awaited."""
        self.joining[endpoint] = (member, now)

    def awaited(self) -> list[tuple[str, C]]:
        """The joins whose answer has not come: read them as the members are."""
        return [(endpoint, member) for endpoint, (member, _) in self.joining.items()]

    def joined(self, endpoint: str, member: C, now: float) -> None:
        """``member`` joined at ``now`` (the node said CONSUMING)."""
        self.joining.pop(endpoint, None)
        self.members[endpoint] = member
        if self.first_joined is None:
            self.first_joined = now

    def settle_joins(self, answered: Callable[[C], bool], now: float) -> list[C]:
        """The joins ``answered`` says were answered are members now (a refusal raised
        by it); those unanswered for the join timeout are returned, for the shell to
        close (``given_up``)."""
        for endpoint, member in self.awaited():
            if answered(member):
                self.joined(endpoint, member, now)
        return self.given_up(now)

    def given_up(self, now: float) -> list[C]:
        """The joins unanswered for the join timeout at ``now``, no longer awaited: the
        shell closes them (a CONSUME the node gets later is said BYE to), and the
        node is tried again at the next refresh if the table still counts it up."""
        timeout = self.join_timeout
        if timeout is None:
            return []
        late = [endpoint for endpoint, (_, sent) in self.joining.items()
                if now - sent >= timeout]
        return [self.joining.pop(endpoint)[0] for endpoint in late]

    def first_joins_done(self, now: float) -> bool:
        """The first joins await no more at ``now``: every node answered (or was
        given up), or the first joined JOIN_GRACE_S ago."""
        return not self.joining or (self.first_joined is not None
                                    and now - self.first_joined >= JOIN_GRACE_S)

    def first_joins_wake(self) -> float | None:
        """When the first joins are to be looked at again if no answer comes: the
        grace's end once one joined, else the first join to give up (None: none is)."""
        if self.first_joined is not None:
            return self.first_joined + JOIN_GRACE_S
        if self.join_timeout is None:
            return None
        return min(sent for _, sent in self.joining.values()) + self.join_timeout

    def with_router_checks(self, wake: float | None,
                           check_at: Callable[[C], float | None]) -> float | None:
        """``wake``, or earlier when a join's endpoint is to be probed before it
        (``check_at``: the member's time for it, None when it has none)."""
        times = [found for _, member in self.awaited()
                 if (found := check_at(member)) is not None]
        if wake is not None:
            times.append(wake)
        return min(times) if times else None

    def every_member(self) -> list[C]:
        """The members and the joins on their way: each to close."""
        return list(self.members.values()) + [member for member, _ in self.joining.values()]

    def in_turn(self) -> list[C]:
        """Every member, starting one further each time (none is always read last)."""
        members = list(self.members.values())
        if not members:
            return members
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
        """When the table is due to be asked again, or a join to be given up."""
        due = self.routes.fetched + REFRESH_S
        if self.join_timeout is not None:
            for _, sent in self.joining.values():
                due = min(due, sent + self.join_timeout)
        return due
