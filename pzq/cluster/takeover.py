"""Delivering the replicas of a node that is down, by the first live holder of each.

Takeover rule, applied by every node alone: while a message's origin is down, the
first live node in the message's holder list delivers it. A takeover pauses the
moment its origin is back (that node delivers its messages itself) and ends once
nothing it sent is still in flight. Time comes in as ``now`` (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.cluster.peers import PeerTable
from pzq.delivery.areas import Area, TakeoverArea
from pzq.delivery.state import DeliveryState
from pzq.logs import get_logger
from pzq.store.replicas import Holders, ReplicaStore
from pzq.store.store import Batch, Participant

log = get_logger("pzq.cluster.takeover")

StateFactory = Callable[[Area], DeliveryState]


class Takeovers(Participant):
    def __init__(self, replicas: ReplicaStore, peers: PeerTable, node_id: bytes,
                 make_state: StateFactory, now: float) -> None:
        self.replicas = replicas
        self.peers = peers
        self.node_id = node_id
        self.make_state = make_state
        self.states: dict[bytes, DeliveryState] = {}
        self.now = now  # the last time liveness was looked at

    def active(self) -> list[DeliveryState]:
        return [state for state in self.states.values() if not state.paused]

    def active_origins(self) -> list[bytes]:
        return sorted(origin for origin, state in self.states.items() if not state.paused)

    def is_first_live_holder(self, holders: Holders) -> bool:
        for holder in holders:
            if holder == self.node_id:
                return True
            if self.peers.node_alive(holder, self.now):
                return False
        return False

    def update(self, now: float) -> None:
        """Start, pause or resume takeovers as origins go down or come back. Only a
        node that hears a majority of the cluster takes over: a node cut off from the
        others must not deliver what the majority side delivers."""
        self.now = now
        quorum = self.peers.quorum()
        for origin in set(self.replicas.origins()) | set(self.states):
            if quorum and not self.peers.node_alive(origin, now):
                self._take_over(origin)
            else:
                self._pause(origin)
        for origin in [o for o, s in self.states.items() if s.paused and not s.inflight]:
            del self.states[origin]

    def _pause(self, origin: bytes) -> None:
        state = self.states.get(origin)
        if state is not None and not state.paused:
            state.paused = True
            log.info("takeover_stopped", origin=origin.decode())

    def _take_over(self, origin: bytes) -> None:
        state = self.states.get(origin)
        if state is None:
            state = self.make_state(TakeoverArea(self.replicas, origin,
                                                 self.is_first_live_holder))
            self.states[origin] = state
            log.warning("takeover_started", origin=origin.decode(),
                        replicas=self.replicas.counts[origin])
        elif state.paused:
            state.paused = False
            log.warning("takeover_resumed", origin=origin.decode())
        state.rewind()  # who is first in line may have changed

    def out_with_consumers(self, origin: bytes) -> set[int]:
        """Messages of ``origin`` this node has sent and not had answered yet."""
        state = self.states.get(origin)
        if state is None:
            return set()
        return {entry.seq for entry in state.inflight.entries()}

    def forget(self, origin: bytes, seq: int) -> None:
        """A message acked elsewhere: no longer ours to deliver or to wait for."""
        state = self.states.get(origin)
        if state is not None:
            state.forget(seq)

    def reap(self, now_us: int) -> int:
        return sum(state.reap(now_us) for state in self.states.values())

    # -- batch participant ---------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        for state in self.states.values():
            state.prepare(batch)

    def written(self) -> None:
        for state in self.states.values():
            state.written()

    def failed(self) -> None:
        for state in self.states.values():
            state.failed()
