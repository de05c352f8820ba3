"""A named group's origins other than this node, as the consume endpoint sees them:
the down nodes this node took over (pzq.cluster.takeover) and the group's replays
(pzq.replay), each origin its own DeliveryState. Also what the endpoint asks of the
cluster, and what it does with own messages a group finished on a node that took them
over."""

from __future__ import annotations

from typing import Protocol

from pzq.delivery.state import DeliveryState
from pzq.events import GroupDoneElsewhere
from pzq.serving.answers import GroupAnswers
from pzq.serving.holding import NamedGroupDelivery, TakenOver
from pzq.store.store import Store
from pzq.store.topics import Topics


class TakenOverGroups(Protocol):
    """Down nodes' messages of a topic and group, by origin (pzq.cluster.takeover)."""

    def taken(self, topic: str, group: str) -> dict[bytes, DeliveryState]: ...


class NoReplays:
    """A node whose groups are not replayed (tests of the endpoint alone)."""

    def states(self, topic: str, group: str) -> dict[bytes, DeliveryState]:
        return {}


class Replayed(Protocol):
    """The replays of a named group, by replay id (pzq.replay.part.Replays)."""

    def states(self, topic: str, group: str) -> dict[bytes, DeliveryState]: ...


def joined(taken: TakenOver, replays: Replayed) -> TakenOver:
    """A group's other origins: the down nodes it took over, and its replays (a dict of
    both only while it has a replay)."""
    replayed = replays.states

    def others(topic: str, group: str) -> dict[bytes, DeliveryState]:
        found = taken(topic, group)
        extra = replayed(topic, group)
        return {**found, **extra} if extra else found
    return others


NO_REPLAYS = NoReplays()


class ClusterWord(Protocol):
    """What the endpoint asks of the cluster (pzq.cluster.lone.Cluster; a lone node's
    says every own message is this node's to deliver now)."""

    @property
    def takeovers(self) -> TakenOverGroups: ...

    def own_delivery_allowed(self, now: float) -> bool: ...  # not right after a start


def finish_done_elsewhere(done: GroupDoneElsewhere, store: Store, topics: Topics,
                          groups: dict[int, NamedGroupDelivery],
                          answers: GroupAnswers) -> None:
    """Own messages the group of their topic finished on a node that took them over
    while this one was down (a group this node does not know is that node's own).
    One the last holding group finished is deleted everywhere."""
    node_id, batch, name = store.node_id, done.batch, done.group
    for seq in done.seqs:
        value = store.get_own(seq)
        if value is None:
            continue
        group = topics.describe(value)[0].groups.get(name)
        deliveries = groups.get(group.id) if group is not None else None
        if deliveries is None:
            continue
        deliveries.release(deliveries.key_of(node_id, seq))
        final = deliveries.state.area.would_release(seq)
        if deliveries.state.done_elsewhere(batch, seq) is not None and final:
            answers.removed(node_id, seq, name, True)
