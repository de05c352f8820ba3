"""Cluster nodes in one process: real stores, real ClusterCores, frames moved by hand.

Each SimNode is what a pzq node keeps (a LevelDB store, its own delivery state, a
ClusterCore); the SimNetwork carries the frames each core wants sent, and can cut
links one way or both. Time is passed in, so the cluster's rules (replication
deadlines, liveness, takeover, tombstones, removes) are tested in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from pzq.cluster.core import ClusterCore
from pzq.cluster.held import PeerHolds
from pzq.cluster.replication import PendingAck
from pzq.cluster.sends import Reply, ToPeer
from pzq.cluster.settings import ClusterSettings
from pzq.counters import Counters
from pzq.delivery.areas import Area, OwnArea
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.events import EventHub
from pzq.protocol.message_keys import parse_message_key
from pzq.store import record
from pzq.store.scheduled import ScheduledArea
from pzq.store.store import Store
from pzq.store.topics import Topics

TIMEOUT_NODES_US = 1_000_000
TIMEOUT_REPLICATION_US = 100_000
T0 = 1000.0  # when a simulation starts (seconds; the cores get time passed in)
AFTER_TIMEOUT = TIMEOUT_NODES_US / 1e6 + 0.5  # long enough for a silent peer to be down
AFTER_REPLICATION = TIMEOUT_REPLICATION_US / 1e6 + 0.01  # past a copy's deadline
DELIVERY = DeliverySettings(ack_timeout_us=1_000_000, inflight_size=1 << 20)


class SimNode:
    def __init__(self, directory: Path, endpoint: str, peers: tuple[str, ...], replicas: int,
                 now: float) -> None:
        self.endpoint = endpoint
        self.store = Store.open(directory / endpoint.replace("/", "_"))
        self.counters = Counters()
        self.hub = EventHub()
        holds = PeerHolds()
        self.own = DeliveryState(OwnArea(self.store), DELIVERY, self.counters, holds)
        self.store.register(self.own)
        settings = ClusterSettings(endpoint, peers, replicas, TIMEOUT_NODES_US / 1e6,
                                   TIMEOUT_REPLICATION_US / 1e6)
        self.scheduled = ScheduledArea(self.store)
        self.store.register(self.scheduled)
        self.core = ClusterCore(settings, self.store, self._state, now,
                                Topics(self.store, "default"), {}, holds, self.hub,
                                self.scheduled)
        self.store.register(self.core)
        self.acks: list[PendingAck] = []  # producer ACKs the core has finished
        self.up = True

    def _state(self, area: Area) -> DeliveryState:
        return DeliveryState(area, DELIVERY, self.counters)

    @property
    def node_id(self) -> bytes:
        return self.store.node_id

    def produce(self, bodies: Iterable[bytes], now: float,
                headers: tuple[bytes, ...] = ()) -> list[int]:
        """Store messages as one written batch and replicate them, as the node does."""
        batch = self.store.begin()
        stored = []
        for body in bodies:
            value = record.encode(body, headers, (body,), 1)
            stored.append((b"producer", body, batch.add_message(value), value))
        self.store.commit(batch)
        if self.core.settings.replicas:
            self.core.replicate(stored, now)
        return [seq for _, _, seq, _ in stored]

    def deliver(self, now_us: int, states: list[DeliveryState] | None = None) -> list[bytes]:
        """Deliver what this node may, returning the keys sent."""
        sent: list[bytes] = []

        def send(delivery: list[bytes]) -> bool:
            sent.append(delivery[0])
            return True

        for state in states if states is not None else self.delivery_states():
            if state.has_work():
                state.deliver(send, now_us, 1000)
        return sent

    def deliver_counted(self, now_us: int) -> dict[bytes, int]:
        """Deliver what this node may: the key of each delivery, with its count."""
        counts: dict[bytes, int] = {}

        def send(seq: int, key: bytes, value: bytes, deliveries: int) -> bool:
            counts[key] = deliveries
            return True

        for state in self.delivery_states():
            if state.has_work():
                state.deliver_raw(send, now_us, 1000)
        return counts

    def delivery_states(self) -> list[DeliveryState]:
        own = [self.own] if self.core.own_delivery_allowed(self.core.takeovers.now) else []
        return own + self.core.takeovers.active()

    def ack(self, key: bytes, now: float) -> bool:
        """A consumer's ACK "1" for ``key``, applied in one batch as the node does:
        the removes it owes the other holders are written in the same batch."""
        origin, seq = parse_message_key(key)
        state = self.own if origin == self.node_id else self.core.takeovers.states.get(origin)
        if state is None:
            return False
        batch = self.store.begin()
        entry = state.ack(batch, seq)
        if entry is not None:
            if origin == self.node_id:
                self.core.removed_own([seq])
            else:
                self.core.removed_taken_over(origin, [seq])
        self.core.owe_removes(batch, now)
        self.store.commit(batch)
        self.core.flush_removes(now)
        return entry is not None

    def ack_group(self, origin: bytes, seq: int, topic: str, group: str, now: float) -> bool:
        """A consumer of a named group of a taken-over origin acks ``seq``, as the
        consume endpoint does: the group's done is owed to the other nodes."""
        state = self.core.takeovers.taken(topic, group).get(origin)
        if state is None:
            return False
        batch = self.store.begin()
        entry = state.ack(batch, seq)
        if entry is not None:
            self.core.removed_taken_over(origin, [seq], group)
        self.core.owe_removes(batch, now)
        self.store.commit(batch)
        self.core.flush_removes(now)
        return entry is not None

    def close(self) -> None:
        self.store.close()


class SimNetwork:
    def __init__(self, directory: Path, count: int, replicas: int, now: float = 1000.0) -> None:
        self.directory = directory
        self.nodes: list[SimNode] = []
        self.by_endpoint: dict[str, SimNode] = {}
        self.run([f"sim://node{i}" for i in range(count)], replicas, now)
        self.cut: set[tuple[str, str]] = set()  # (from, to) links that drop frames

    def run(self, endpoints: list[str], replicas: int, now: float) -> list[SimNode]:
        """Stop every node, and start those of ``endpoints`` (their stores as they
        were), each with the others as its --nodes: as ``pzq --shards`` with another
        count does."""
        self.close()
        self.nodes = [SimNode(self.directory, endpoint,
                              tuple(e for e in endpoints if e != endpoint), replicas, now)
                      for endpoint in endpoints]
        self.by_endpoint = {node.endpoint: node for node in self.nodes}
        return self.nodes

    def cut_off(self, node: SimNode) -> None:
        for other in self.nodes:
            if other is not node:
                self.cut |= {(node.endpoint, other.endpoint), (other.endpoint, node.endpoint)}

    def heal(self) -> None:
        self.cut.clear()

    def _passes(self, source: str, target: str) -> bool:
        return ((source, target) not in self.cut and self.by_endpoint[source].up
                and self.by_endpoint[target].up)

    def step(self, now: float, heartbeat: bool = False) -> None:
        """One round: heartbeats if asked, then every frame delivered until quiet."""
        if heartbeat:
            for node in self.nodes:
                if node.up:
                    node.core.heartbeat(now, node.own)
        for _ in range(20):
            if not self._deliver_all(now):
                return
        raise AssertionError("the cluster did not go quiet")

    def step_in_one_wake(self, now: float) -> None:
        """The frames queued now, each node reading all of those sent to it in one
        wake (one batch), as a busy node does; then their replies, and a ``step``."""
        for target in self.nodes:
            queued = [(source, item) for source in self.nodes
                      for item in source.core.outgoing
                      if isinstance(item, ToPeer) and item.endpoint == target.endpoint
                      and self._passes(source.endpoint, target.endpoint)]
            if not queued:
                continue
            batch = target.store.begin()
            for source, item in queued:
                source.core.outgoing.remove(item)
                target.core.receive_request(source.endpoint.encode(), item.frames, batch,
                                            target.own, now)
            target.store.commit(batch)
            sources = {source.endpoint.encode(): source for source, _ in queued}
            for reply in target.core.take_outgoing():
                if isinstance(reply, Reply):
                    self._reply(target, sources[reply.routing_id], reply, now)
                else:
                    target.core.outgoing.append(reply)
        self.step(now)

    def _deliver_all(self, now: float) -> bool:
        moved = False
        for node in self.nodes:
            outgoing = node.core.take_outgoing()
            for item in outgoing:
                moved = True
                if isinstance(item, ToPeer):
                    self._request(node, item, now)
                else:
                    raise AssertionError(f"a reply outside a request: {item}")
        return moved

    def _request(self, source: SimNode, item: ToPeer, now: float) -> None:
        target = self.by_endpoint[item.endpoint]
        if not self._passes(source.endpoint, target.endpoint):
            return
        routing_id = source.endpoint.encode()
        batch = target.store.begin()
        target.core.receive_request(routing_id, item.frames, batch, target.own, now)
        target.store.commit(batch)
        for reply in target.core.take_outgoing():
            if isinstance(reply, Reply):
                self._reply(target, source, reply, now)
            else:
                target.core.outgoing.append(reply)  # its own requests go out next round

    def _reply(self, source: SimNode, target: SimNode, reply: Reply, now: float) -> None:
        if not self._passes(source.endpoint, target.endpoint):
            return
        batch = target.store.begin()
        done = target.core.receive_reply(source.endpoint, reply.frames, batch, target.own, now)
        target.store.commit(batch)
        target.acks.extend(done)

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def three_heard(tmp_path: Path, now: float) -> Iterator[SimNetwork]:
    """Three nodes with --replicas 2 that have heard each other once: a fixture's body
    (closed after the test)."""
    network = SimNetwork(tmp_path, 3, replicas=2, now=now)
    network.step(now, heartbeat=True)
    yield network
    network.close()
