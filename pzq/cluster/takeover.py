"""Delivering the replicas of a node that is down, by the first live holder of each.

Takeover rule, applied by every node alone: while a message's origin is down, the
first live node in the message's holder list delivers it. A takeover pauses the
moment its origin is back (that node delivers its messages itself) and ends once
nothing it sent is still in flight. Time comes in as ``now`` (monotonic seconds).

A takeover serves every group of the origin: ``default`` (``states``, delivered on
--send-dsn) and each named group the origin told us of in TOPICS (``groups``, keyed
by topic and group name, delivered on --consume-dsn to that group's consumers).

An origin restored from a backup lost what it stored after the backup (RESTORED
names those seqs, pzq.backup.manifest): while it is up, its copies among them are
delivered here as in a takeover, by the same rule, and only those (``lost``); the
takeover ends once none is held. One of a down origin that comes back restored
first pauses as any, and starts again for those seqs once nothing it sent is out.
Those seqs are kept in the store while a copy in them is held (pzq.cluster.kept_lost).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pzq.cluster.kept_lost import KeptLost, Ranges
from pzq.cluster.peers import PeerTable
from pzq.delivery.areas import TakeoverArea
from pzq.delivery.state import DeliveryState
from pzq.logs import get_logger
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.store.batch import Batch, Participant
from pzq.store.replicas import Holders, ReplicaStore
from pzq.store.scheduled_copies import ScheduledCopies

log = get_logger("pzq.cluster.takeover")

StateFactory = Callable[[TakeoverArea], DeliveryState]
GROUP_COUNTS = ("delivered", "redelivered", "acked", "nacked", "expired", "dead_lettered")


def state_figures(state: DeliveryState, now_us: int) -> dict[str, object]:
    oldest = state.inflight.oldest()
    return {"inflight": len(state.inflight), "ready": len(state.ready),
            "oldest_unacked_seconds": (round((now_us - oldest.sent_us) / 1e6, 3)
                                       if oldest is not None else 0)}


class Takeovers(Participant):
    def __init__(self, replicas: ReplicaStore, copies: ScheduledCopies, peers: PeerTable,
                 node_id: bytes, make_state: StateFactory, now: float) -> None:
        self.replicas = replicas
        self.copies = copies  # an origin's scheduled copies are taken over too
        self.peers = peers
        self.node_id = node_id
        self.make_state = make_state
        self.states: dict[bytes, DeliveryState] = {}
        self.groups: dict[bytes, dict[tuple[str, str], DeliveryState]] = {}
        self.now = now  # the last time liveness was looked at
        self.kept = KeptLost(replicas.store)  # origin -> seqs its restore lost
        self.lost = self.kept.ranges
        # Origins up whose takeover delivers only what their restore lost, and those seqs
        self.lost_only: dict[bytes, list[tuple[int, int]]] = {}

    def active(self) -> list[DeliveryState]:
        return [state for state in self.states.values() if not state.paused]

    def active_origins(self) -> list[bytes]:
        return sorted(origin for origin, state in self.states.items() if not state.paused)

    def serves(self, origin: bytes, seq: int, holders: Holders) -> bool:
        """Whether this node delivers the copy now: first in line, and of a down origin
        or among the seqs an origin that is up lost in a restore."""
        ranges = self.lost_only.get(origin)
        if ranges is not None and not any(first <= seq < end for first, end in ranges):
            return False
        return self.is_first_live_holder(holders)

    def restored(self, batch: Batch, origin: bytes, ranges: Ranges) -> None:
        """The origin said which seqs its restore lost (RESTORED): kept in ``batch``
        while a copy in them is held here, taken over from the next look at liveness
        on. Holding none, nothing is kept (nor will be: its copies are given out)."""
        if self.lost.get(origin) == ranges:
            return
        kept = self._holds_in(origin, ranges)
        if kept:
            self.kept.keep(batch, origin, ranges)
        else:
            self.kept.drop(origin, "none held of a later restore's")
        log.info("peer_restored", origin=origin.decode(), lost_seqs=ranges,
                 replicas=self.replicas.counts[origin], kept=kept)

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
        quorum = self.peers.quorum(now)
        holding_lost = self._holding_lost()
        for origin in set(self.replicas.origins()) | set(self.copies.counts) | set(self.states):
            if quorum and not self.peers.node_alive(origin, now):
                self.lost_only.pop(origin, None)  # (from a part to every copy: no risk)
                self._take_over(origin)
            elif (quorum and (origin not in self.states or origin in self.lost_only)
                  and origin in holding_lost):
                # (a whole takeover paused first: what it has out may be the origin's)
                self.lost_only[origin] = self.lost[origin]
                self._take_over(origin)
            else:
                self._pause(origin)
        for origin in [o for o in self.states if self._finished(o)]:
            del self.states[origin]
            self.groups.pop(origin, None)
            self.lost_only.pop(origin, None)

    def _holding_lost(self) -> set[bytes]:
        """The origins a copy of whose lost seqs is held here; the others' are dropped
        (delivered, or removed: none comes again, the origin gives out seqs after them)."""
        holding = set()
        for origin, ranges in list(self.lost.items()):
            if self._holds_in(origin, ranges):
                holding.add(origin)
            else:
                self.kept.drop(origin, "none held")
        return holding

    def _holds_in(self, origin: bytes, ranges: Ranges) -> bool:
        """Whether a copy of the origin's in ``ranges`` is held here (one seek per
        range)."""
        return any(self.replicas.holds_between(origin, first, end)
                   or self.copies.holds_between(origin, first, end)
                   for first, end in ranges)

    def _finished(self, origin: bytes) -> bool:
        return all(state.paused and not state.inflight for state in self._all(origin))

    def _all(self, origin: bytes) -> list[DeliveryState]:
        found = self.states.get(origin)
        own = [found] if found is not None else []
        return own + list(self.groups.get(origin, {}).values())

    def taken(self, topic: str, group: str) -> dict[bytes, DeliveryState]:
        """The taken-over deliveries of a named group, by origin (paused ones too:
        they still take ACKs)."""
        found = {}
        for origin, groups in self.groups.items():
            state = groups.get((topic, group))
            if state is not None:
                found[origin] = state
        return found

    def _pause(self, origin: bytes) -> None:
        state = self.states.get(origin)
        if state is not None and not state.paused:
            for each in self._all(origin):
                each.paused = True
            log.info("takeover_stopped", origin=origin.decode(),
                     lost_in_restore=origin in self.lost_only)

    def _take_over(self, origin: bytes) -> None:
        state = self.states.get(origin)
        lost = self.lost_only.get(origin)
        if state is None:
            state = self.make_state(TakeoverArea(self.replicas, origin,
                                                 partial(self.serves, origin)))
            self.states[origin] = state
            if lost is None:
                log.warning("takeover_started", origin=origin.decode(),
                            replicas=self.replicas.counts[origin])
            else:
                log.warning("restored_takeover_started", origin=origin.decode(),
                            lost_seqs=lost, replicas=self.replicas.counts[origin])
        elif state.paused:
            log.warning("takeover_resumed", origin=origin.decode(),
                        lost_in_restore=lost is not None)
        self._take_over_groups(origin)
        for each in self._all(origin):
            each.paused = False
            # Who is first in line may have changed; and a takeover resumed after a
            # pause counts on from what the origin delivered while it was back.
            each.rewind(each.area.delivered_below())

    def _take_over_groups(self, origin: bytes) -> None:
        """A state per named group the origin told us of (none from an older node)."""
        reads = self.replicas.default_reads.get(origin)
        groups = self.groups.setdefault(origin, {})
        if reads is None:
            return
        for topic, named in reads.groups.items():
            for group in named:
                if (topic, group.name) not in groups:
                    groups[(topic, group.name)] = self.make_state(TakeoverArea(
                        self.replicas, origin, partial(self.serves, origin), group.name,
                        topic))

    def out_with_consumers(self, origin: bytes) -> set[int]:
        """Messages of ``origin`` this node has sent and not had answered yet."""
        return {entry.seq for state in self._all(origin) for entry in state.inflight.entries()}

    def forget(self, origin: bytes, seq: int, group: str | None = None) -> None:
        """A message acked elsewhere (by ``group``; None: by every group): no longer
        ours to deliver or to wait for."""
        state = self.states.get(origin)
        if state is not None and group in (None, DEFAULT_GROUP):
            state.forget(seq)
        for (_, name), named in self.groups.get(origin, {}).items():
            if group in (None, name):
                named.forget(seq)

    def forget_all(self, origin: bytes, seqs: list[int]) -> None:
        """``forget`` of each seq by every group (nothing to do, mostly: the origin is
        up and nothing of it is taken over)."""
        if origin in self.states or self.groups.get(origin):
            for seq in seqs:
                self.forget(origin, seq)

    def every_state(self) -> list[DeliveryState]:
        return [state for origin in self.states for state in self._all(origin)]

    def reap(self, now_us: int) -> int:
        """Expired deliveries back; the count is ``default``'s (its window's)."""
        for groups in self.groups.values():
            for state in groups.values():
                state.reap(now_us)
        return sum(state.reap(now_us) for state in self.states.values())

    # -- monitor ---------------------------------------------------------------------

    def figures(self, now_us: int) -> dict[str, object]:
        """Per origin taken over (paused ones too, while they wait for ACKs): the copies
        held, and what ``default`` and each named group have out and waiting; a named
        group also its own counts."""
        return {origin.decode(): {
            "paused": state.paused,
            "lost_in_restore": origin in self.lost_only,
            "replicas": self.replicas.counts[origin],
            "default": state_figures(state, now_us),
            "topics": self._group_figures(origin, now_us),
        } for origin, state in sorted(self.states.items())}

    def _group_figures(self, origin: bytes, now_us: int) -> dict[str, dict[str, object]]:
        topics: dict[str, dict[str, object]] = {}
        for (topic, group), state in sorted(self.groups.get(origin, {}).items()):
            counters = state.counters.as_dict()
            topics.setdefault(topic, {})[group] = {
                **state_figures(state, now_us), **{name: counters[name] for name in GROUP_COUNTS}}
        return topics

    # -- batch participant ---------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        self.kept.prepare(batch)
        for state in self.every_state():
            state.prepare(batch)

    def written(self) -> None:
        self.kept.written()
        for state in self.every_state():
            state.written()

    def failed(self) -> None:
        self.kept.failed()
        for state in self.every_state():
            state.failed()
