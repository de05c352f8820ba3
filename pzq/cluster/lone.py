"""What the node asks of its cluster (``Cluster``, served by pzq.cluster.core), and the
answer of a node without one (``NoCluster``, no --broadcast-dsn): nobody holds copies
or has taken anything over, so there is nothing to tell, replicate or wait for, and
every own message is this node's to deliver.

The cluster's sockets (pzq.cluster.links) exist only with a cluster: its part of the
loop (pzq.cluster.part) is opened only then.
"""

from __future__ import annotations

from typing import Protocol

from pzq.clock import Now
from pzq.cluster.figures import NO_CLUSTER
from pzq.cluster.replication import PendingAck
from pzq.cluster.routes import Routes
from pzq.delivery.state import DeliveryState
from pzq.parts import Part
from pzq.protocol import cluster as cw
from pzq.security import NodeSecurity
from pzq.store.batch import Batch
from pzq.store.record import ScheduledStored, Stored
from pzq.store.scheduled_copies import HeldCopy
from pzq.zmqio import Context


class TakenOver(Protocol):
    """Down nodes' messages this node serves (pzq.cluster.takeover)."""

    @property
    def states(self) -> dict[bytes, DeliveryState]: ...  # ``default``'s, by origin

    def taken(self, topic: str, group: str) -> dict[bytes, DeliveryState]: ...

    def reap(self, now_us: int) -> int: ...

    def figures(self, now_us: int) -> dict[str, object]: ...


class TakenCopies(Protocol):
    """Down nodes' scheduled copies this node releases (pzq.cluster.scheduled_takeover)."""

    def next_due_us(self) -> int | None: ...

    def due(self, now_us: int, limit: int) -> list[HeldCopy]: ...

    def release(self, batch: Batch, copy: HeldCopy) -> None: ...


class Cluster(Protocol):
    """What the node, its endpoints' parts and its figures ask of the cluster."""

    @property
    def routes(self) -> Routes: ...

    @property
    def takeovers(self) -> TakenOver: ...

    @property
    def taken_copies(self) -> TakenCopies: ...

    def open_part(self, context: Context, security: NodeSecurity, own: DeliveryState,
                  now: Now) -> Part: ...  # its sockets in the node's loop

    def removed(self, origin: bytes, seq: int, group: str = cw.DEFAULT_GROUP,
                final: bool = True) -> None: ...

    def removed_all(self, origin: bytes, seqs: list[int], group: str,
                    finals: list[bool]) -> None: ...  # ``removed`` of each seq

    def tell_holders(self, batch: Batch, removed: list[int], group: str, done: list[int],
                     now: float) -> None: ...

    def replicate(self, stored: list[Stored], now: float) -> None: ...

    def replicate_quietly(self, messages: list[tuple[int, bytes]], now: float) -> None: ...

    def replicate_scheduled(self, scheduled: list[ScheduledStored], now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def fail_all(self) -> list[PendingAck]: ...

    def own_delivery_allowed(self, now: float) -> bool: ...

    def snapshot(self, now: float) -> dict[str, object]: ...


class NoTakeovers:
    """Nothing taken over: no states, nothing to reap or show."""

    def __init__(self) -> None:
        self.states: dict[bytes, DeliveryState] = {}

    def taken(self, topic: str, group: str) -> dict[bytes, DeliveryState]:
        return {}

    def reap(self, now_us: int) -> int:
        return 0

    def figures(self, now_us: int) -> dict[str, object]:
        return {}


class NoTakenCopies:
    """No copies held: nothing comes due."""

    def next_due_us(self) -> int | None:
        return None

    def due(self, now_us: int, limit: int) -> list[HeldCopy]:
        return []

    def release(self, batch: Batch, copy: HeldCopy) -> None:
        pass


class NoCluster:
    """A node without --broadcast-dsn. It never replicates: --replicas needs --nodes,
    which need --broadcast-dsn (pzq.node.config)."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes  # this node alone (LONE_NODE)
        self.takeovers = NoTakeovers()
        self.taken_copies = NoTakenCopies()

    def open_part(self, context: Context, security: NodeSecurity, own: DeliveryState,
                  now: Now) -> Part:
        return Part()  # no sockets: nothing for the loop to do

    def removed(self, origin: bytes, seq: int, group: str = cw.DEFAULT_GROUP,
                final: bool = True) -> None:
        pass

    def removed_all(self, origin: bytes, seqs: list[int], group: str,
                    finals: list[bool]) -> None:
        pass

    def tell_holders(self, batch: Batch, removed: list[int], group: str, done: list[int],
                     now: float) -> None:
        pass

    def replicate(self, stored: list[Stored], now: float) -> None:
        pass

    def replicate_quietly(self, messages: list[tuple[int, bytes]], now: float) -> None:
        pass

    def replicate_scheduled(self, scheduled: list[ScheduledStored], now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def fail_all(self) -> list[PendingAck]:
        return []

    def own_delivery_allowed(self, now: float) -> bool:
        return True

    def snapshot(self, now: float) -> dict[str, object]:
        return NO_CLUSTER
