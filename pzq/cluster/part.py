"""The cluster as a part of the node's loop (pzq.parts): its sockets (pzq.cluster.links),
peers' frames into the wake's batch, what the wake's ACKs leave owed to the peers
into the same batch, the core's frames out after the write, heartbeats at the
heartbeat's tick, and a wake for the next replication deadline. Producer ACKs that
waited for copies are published on the node's hub as they complete (all copies
confirmed, or the deadline passed), for the producers' endpoint. At a stop by
SIGTERM, after the last wake, the peers are told the node is leaving (LEAVING).
"""

from __future__ import annotations

from pzq.clock import Now
from pzq.cluster.links import ClusterLinks
from pzq.cluster.replication import CopiesSettled, PendingAck
from pzq.delivery.state import DeliveryState
from pzq.events import EventHub
from pzq.parts import HEARTBEAT, Figures, Part
from pzq.store.batch import Batch
from pzq.zmqio import Events, Socket


def heartbeat_period_us(timeout_nodes_s: float) -> int:
    """Several heartbeats per --timeout-nodes, at least one a second, at most 100 a second."""
    return max(10_000, min(1_000_000, round(timeout_nodes_s * 1_000_000) // 4))


class ClusterPart(Part):
    def __init__(self, links: ClusterLinks, own: DeliveryState, hub: EventHub) -> None:
        self.links = links
        self.core = links.core
        self.own = own  # this node's ``default`` state: what peers still have out
        self.hub = hub

    def bound(self) -> list[Socket]:
        return [self.links.router]

    def polled(self) -> list[Socket | int]:
        return list(self.links.sockets())

    def ticks(self) -> dict[bytes, int]:
        return {HEARTBEAT: heartbeat_period_us(self.core.settings.timeout_nodes_s)}

    def start(self, now: Now) -> None:
        self.links.heartbeat(now.mono, self.own)  # the peers hear of this node at once

    def timeout_ms(self, now: Now) -> int | None:
        deadline = self.core.next_deadline()
        return None if deadline is None else max(0, int((deadline - now.mono) * 1000) + 1)

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if HEARTBEAT in reasons:
            self.links.heartbeat(now.mono, self.own)

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        self._settled(self.links.receive(events, batch, self.own, now.mono))
        self.core.routes.adopt(now.wall_us)

    def finish(self, batch: Batch, now: Now) -> None:
        """The removes and dones the wake's ACKs owe the peers, persisted with them."""
        self.core.owe_removes(batch, now.mono)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        self._settled(self.core.expire(now.mono))
        self.core.flush_removes(now.mono)
        self.links.send()

    def _settled(self, acks: list[PendingAck]) -> None:
        if acks:
            self.hub.publish(CopiesSettled(acks))

    def hand_back(self, seconds: float) -> Figures:
        """After the last wake (its copies and ACKs went): tell the peers it leaves."""
        self.links.leave()
        return {}

    def close(self) -> None:
        self.links.close()
