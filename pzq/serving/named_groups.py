"""The named groups of --consume-dsn as the administration and the figures see them,
whether or not this node serves them: the consume endpoint (pzq.serving.consume_endpoint),
or ``NoConsumeEndpoint`` on a node without --consume-dsn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from pzq.serving.holding import NamedGroupDelivery, ServedConsumer
from pzq.store.batch import Batch
from pzq.store.topics import Group, Topic


class NamedGroups(Protocol):
    """What the admin verbs and the figures ask of the named groups served on
    --consume-dsn (ConsumeEndpoint), whether or not this node serves them."""

    served: bool  # False: the node has no --consume-dsn

    @property
    def groups(self) -> Mapping[int, NamedGroupDelivery]: ...

    def make_group(self, batch: Batch, topic: Topic, name: str, start: str | int,
                   pattern: str, now_us: int) -> Group: ...

    def settings_changed(self, group: Group) -> None: ...

    def forget(self, seq: int) -> None: ...

    def drop_group(self, topic: Topic, name: str) -> None: ...


class NoConsumeEndpoint:
    """A node without --consume-dsn: no named group is served here, so none has
    deliveries to show, to forget or to let go."""

    served = False

    def __init__(self) -> None:
        self.groups: dict[int, NamedGroupDelivery] = {}

    def make_group(self, batch: Batch, topic: Topic, name: str, start: str | int,
                   pattern: str, now_us: int) -> Group:
        raise ValueError("the node has no --consume-dsn: groups are read there")

    def settings_changed(self, group: Group) -> None:
        pass

    def forget(self, seq: int) -> None:
        pass

    def drop_group(self, topic: Topic, name: str) -> None:
        pass


def drop_served_group(groups: dict[int, NamedGroupDelivery], consumers: dict[bytes, ServedConsumer],
                      topic: Topic, name: str, error: Callable[[bytes, str], None]) -> None:
    """An operator removed the group: its consumers are told (``error``) and let go, its
    deliveries stop."""
    for group_id, deliveries in list(groups.items()):
        if deliveries.group.topic is topic and deliveries.group.name == name:
            for consumer in list(deliveries.consumers):
                error(consumer.routing_id, f"group {name} of topic {topic.name} was removed")
                consumers.pop(consumer.routing_id, None)
            deliveries.consumers.clear()
            deliveries.state.paused = True
            del groups[group_id]


def served_last(groups: dict[int, NamedGroupDelivery], served: list[int]) -> None:
    """The groups just served (ids, in the order served) go to the end of the next
    delivery pass, so the one served least recently goes first. In a fixed order the
    first group's batch goes out first in every wake, its ACK comes back first and gets
    a wake of its own while the others' are on the way: the last group drains slowest."""
    for group_id in served:
        groups[group_id] = groups.pop(group_id)


def forget_served(groups: dict[int, NamedGroupDelivery], node_id: bytes, seq: int) -> None:
    """An operator deleted the own message ``seq``: no group delivers it any more."""
    for deliveries in groups.values():
        deliveries.state.forget(seq)
        deliveries.release(deliveries.key_of(node_id, seq))


def settle_served(groups: dict[int, NamedGroupDelivery], topic: str, name: str) -> None:
    """A replay of the group ended: what its consumers held of it is theirs no more."""
    for deliveries in groups.values():
        if deliveries.topic == topic and deliveries.name == name:
            deliveries.settle()
