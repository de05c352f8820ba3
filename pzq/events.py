"""What happens in a node that other parts act on, and the hub that carries it.

The node owns one ``EventHub``. A part that acts on an event subscribes to its type
when it is opened; the part where it happens publishes it, without knowing who
listens (dramatiq's middleware is told the same way). So the cluster does not hold
the consume endpoint's callbacks, nor the ZPER writer its ack publisher: each
subscription is one line at the listener's opening, and a part that is off does
not subscribe. Events that happen once in a while go through the hub; a question
asked per message (whether another node has it out) is a narrow protocol given to
the delivery state at its creation (pzq.delivery.held).

The events every node has are here; a part's own events live beside it (the ZPER
writer's ``WritesDurable``, the cluster's ``CopiesSettled``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pzq.store.batch import Batch

E = TypeVar("E")


class EventHub:
    """Handlers by the type of event they take, called in the order they subscribed."""

    def __init__(self) -> None:
        self._handlers: dict[type, list[Callable[[Any], None]]] = {}

    def subscribe(self, kind: type[E], handler: Callable[[E], None]) -> None:
        self._handlers.setdefault(kind, []).append(handler)

    def publish(self, event: object) -> None:
        for handler in self._handlers.get(type(event), ()):
            handler(event)

    def heard(self, kind: type) -> bool:
        """Whether any part acts on events of this kind."""
        return kind in self._handlers


@dataclass(frozen=True, slots=True)
class PeersReleased:
    """A peer let some of this node's messages go (it gave them up, ACKed them, or went
    down with them out): they were skipped while held, so every reader looks again."""


@dataclass(frozen=True, slots=True)
class GroupDoneElsewhere:
    """Own messages the named group ``group`` finished on a node that took them over
    while this one was down, applied in the wake's ``batch``."""

    batch: Batch
    group: str
    seqs: list[int]


@dataclass(frozen=True, slots=True)
class ReplayEnded:
    """A replay of the named group ``group`` of ``topic`` was cancelled or finished: its
    deliveries are no longer anyone's (pzq.replay)."""

    topic: str
    group: str
