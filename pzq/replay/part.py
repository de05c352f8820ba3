"""The replays of a node: their verbs on the monitor, their reader's part of the loop,
and their delivery states, which the named group's delivery serves beside its own.

    REPLAY GROUP topic group from=earliest|TIME|OFFSET [to=TIME|OFFSET]
    REPLAY CANCEL id
    REPLAYS [topic]

The reader is rate-limited (--replay-rate, messages a second, for all replays of the
node together) and reads ahead of the group's ACKs by at most AHEAD messages, so a
replay of millions neither starves the live path nor fills the store. Each wake it
reads what the rate allows into the wake's batch, with the replay's position and
count in the same batch: a SIGKILL loses nothing and reads nothing twice, and after
a restart the replay's messages not yet ACKed are delivered again, as a restart does
with live ones, and its reader goes on from its position.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import partial

from pzq.agenda import Agenda
from pzq.archive.contract import ArchiveLogs
from pzq.clock import Now
from pzq.counters import Counters
from pzq.delivery.groups import group_settings
from pzq.delivery.replay_area import DONE, READ, READING, ReplayArea, ReplayRecord
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.errors import ArchiveError, DecodeError, StoreError
from pzq.events import EventHub, ReplayEnded
from pzq.hooks import nothing
from pzq.logs import get_logger
from pzq.parts import REAP, Figures, Part, Verb
from pzq.protocol.monitor_text import messages
from pzq.replay.entry import Replay
from pzq.replay.range import Bound, Resolved, resolve
from pzq.replay.reader import read_chunk
from pzq.replay.request import Cancel, named_group, parse_request, range_words
from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store
from pzq.store.topics import Group, Topics

log = get_logger("pzq.replay")

AHEAD = 10_000  # a replay's messages in the store not yet ACKed, at most
CHUNK = 512  # messages one replay reads in one wake, at most
# origin, seq, group, final: a group was done with a message (pzq.serving.answers)
Removed = Callable[[bytes, int, str, bool], None]
RemovedAll = Callable[[bytes, list[int], str, list[bool]], None]



class ArchiveUnreadable(ValueError):
    """A replay's range could not be read: a segment the node knew of is gone."""

class Replays(Part, Participant):
    """``logs``: the node's archive (none without --archive-dir); ``rate``: messages a
    second the readers take together."""

    def __init__(self, store: Store, topics: Topics, logs: ArchiveLogs,
                 settings: DeliverySettings, rate: int, hub: EventHub) -> None:
        self._wait_changed: Callable[[], None] = nothing  # until joined
        self._reads: Callable[[], None] = nothing
        self._rest: Callable[[], None] = nothing
        self.store = store
        self.topics = topics
        self.logs = logs
        self.settings = settings
        self.rate = rate
        self.hub = hub
        self.replays: dict[bytes, Replay] = {}
        # the delivery states of each named group's replays, by replay id (the origin
        # of their message keys), as pzq.serving.consume_endpoint asks for them
        self.by_group: dict[tuple[str, str], dict[bytes, DeliveryState]] = {}
        self.budget = 0.0  # messages the readers may take now
        self.budget_at = 0.0  # monotonic seconds when the budget was last filled
        self.reading: list[Replay] = []  # replays whose reader read in this batch
        self.idle = True  # (Participant) while no replay runs
        self._load()
        store.register(self)

    # -- what the rest of the node asks ---------------------------------------------

    def states(self, topic: str, group: str) -> dict[bytes, DeliveryState]:
        return self.by_group.get((topic, group), {})

    def removed_filter(self, removed: Removed) -> Removed:
        """``removed`` for every message but a replay's, which no peer holds."""
        replays = self.replays

        def filtered(origin: bytes, seq: int, group: str, final: bool) -> None:
            if origin not in replays:
                removed(origin, seq, group, final)
        return filtered

    def removed_all_filter(self, removed_all: RemovedAll) -> RemovedAll:
        """``removed_all`` for every message but a replay's."""
        replays = self.replays

        def filtered(origin: bytes, seqs: list[int], group: str, finals: list[bool]) -> None:
            if origin not in replays:
                removed_all(origin, seqs, group, finals)
        return filtered

    # -- loading -------------------------------------------------------------------

    def _load(self) -> None:
        for _, value in self.store.iterate(keyspace.REPLAY_RECORD_PREFIX):
            record = ReplayRecord.decode(value)
            group = self._group_of(record)
            area = ReplayArea(self.store, record)
            if group is None:  # the group went while the node was down: so does the replay
                self._delete(record, area)
                continue
            self._add(record, area, group)

    def _group_of(self, record: ReplayRecord) -> Group | None:
        topic = self.topics.topics.get(record.topic)
        return None if topic is None else topic.groups.get(record.group)

    def _add(self, record: ReplayRecord, area: ReplayArea, group: Group) -> Replay:
        state = None
        if record.state != DONE:
            state = DeliveryState(area, group_settings(self.settings, group), Counters())
            self.by_group.setdefault((record.topic, record.group), {})[area.node_id] = state
        replay = self.replays[area.node_id] = Replay(record, area, state)
        self.idle = False
        self._wait_changed()
        self._reads()
        return replay

    def _delete(self, record: ReplayRecord, area: ReplayArea) -> None:
        batch = self.store.begin()
        batch.delete_keys([key for key, _ in self.store.iterate(area.prefix, values=False)])
        batch.delete(keyspace.replay_record_key(area.node_id))
        self.store.commit(batch)

    # -- the loop ------------------------------------------------------------------

    tells_wait = True  # told when a replay is added, and at each wake while any runs

    def join(self, agenda: Agenda) -> None:
        self._wait_changed = partial(agenda.changed, self)
        self._reads = partial(agenda.ask, self, "finish")  # while any replay is on
        self._rest = partial(agenda.rest, self, "finish")
        if not self.replays:
            self._rest()

    def start(self, now: Now) -> None:
        self.budget_at = now.mono

    def timeout_ms(self, now: Now) -> int | None:
        """When the budget allows the next chunk of a replay that can read."""
        if not self.replays or not any(self._can_read(replay) for replay in self.replays.values()):
            return None
        short = self._wanted() - self._budget(now.mono)
        return 0 if short <= 0 else math.ceil(short / self.rate * 1000)

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if REAP in reasons:  # before the groups settle who holds what (the consume part)
            for replay in self.replays.values():
                if replay.state is not None:
                    replay.state.reap(now.wall_us)

    def finish(self, batch: Batch, now: Now) -> None:
        """Read what the rate allows, into the wake's batch; finish replays done with."""
        if not self.replays:
            self._rest()  # asked again when one is added
            return
        self._wait_changed()
        for replay in list(self.replays.values()):
            group = self._group_of(replay.record)
            if group is None:
                self._drop(replay, batch)
            elif self._can_read(replay) and self._budget(now.mono) >= 1:
                self._read(replay, batch, group)
            elif self._all_done(replay):
                self._finish(replay, batch)

    def _wanted(self) -> float:
        """A chunk worth a wake: a twentieth of a second's rate, at most CHUNK."""
        return min(CHUNK, max(1.0, self.rate / 20))

    def _budget(self, mono: float) -> float:
        """What the rate allows now, saved up for a second at most: a node whose wakes
        come late (its core shared) keeps the rate, and one whose replay waited for
        ACKs reads at most a second's worth, CHUNK a wake, before it paces again."""
        self.budget = min(max(self._wanted(), float(self.rate)),
                          self.budget + (mono - self.budget_at) * self.rate)
        self.budget_at = mono
        return self.budget

    def _can_read(self, replay: Replay) -> bool:
        record = replay.record
        return (record.state == READING and record.position < record.end
                and replay.area.left < AHEAD and not replay.broken)

    def _drop(self, replay: Replay, batch: Batch) -> None:
        """The group was removed: so is its replay, in the wake's batch."""
        record, area = replay.record, replay.area
        batch.delete_keys([key for key, _ in self.store.iterate(area.prefix, values=False)])
        batch.delete(keyspace.replay_record_key(area.node_id))
        del self.replays[area.node_id]
        if replay.state is not None:
            self._drop_state(replay)
        log.info("replay_dropped", replay=record.id, topic=record.topic, group=record.group,
                 reason="the group was removed")

    def _read(self, replay: Replay, batch: Batch, group: Group) -> None:
        record, area = replay.record, replay.area
        log_ = self.logs.log(record.topic)
        most = min(CHUNK, int(self.budget), AHEAD - area.left)
        try:
            if not self.logs.present:  # started again without it
                raise ArchiveError("this node has no --archive-dir")
            if log_ is None:
                raise ArchiveError(f"the archive has no topic {record.topic}")
            chunk = read_chunk(log_, record.position, record.end, most, record.from_us,
                               record.to_us, group.takes)
        except (ValueError, ArchiveError, OSError) as exc:
            # stopped until the node starts again (what it read is delivered meanwhile)
            replay.broken = str(exc)
            log.error("replay_read_failed", replay=record.id, position=record.position,
                      error=str(exc))
            return
        replay.undo = (record.written, record.position, record.state, [])
        seqs = replay.undo[3]
        for value in chunk.records:
            seq = record.written
            batch.put(keyspace.replay_key(area.node_id, seq), value)
            area.present.add(seq)
            seqs.append(seq)
            record.written += 1
        record.position = chunk.position
        if record.position >= record.end:
            record.state = READ
            record.expected, record.estimated = record.written, False
        self.budget -= len(chunk.records)
        record.save(batch)
        self.reading.append(replay)
        self.idle = False

    def _all_done(self, replay: Replay) -> bool:
        state = replay.state
        return (state is not None and replay.record.state == READ and not replay.area.left
                and not state.inflight and not state.ready and not state.delayed)

    def _finish(self, replay: Replay, batch: Batch) -> None:
        record = replay.record
        record.state = DONE
        record.save(batch)
        self._drop_state(replay)
        log.info("replay_done", replay=record.id, topic=record.topic, group=record.group,
                 messages=record.written, acked=replay.area.acked, dead=record.dead)

    def _drop_state(self, replay: Replay) -> None:
        record = replay.record
        states = self.by_group.get((record.topic, record.group), {})
        states.pop(replay.area.node_id, None)
        if not states:
            self.by_group.pop((record.topic, record.group), None)
        replay.state = None
        self.hub.publish(ReplayEnded(record.topic, record.group))

    # -- batch participant: the states' writes, and the reads undone on a failure ----

    def _states(self) -> list[DeliveryState]:
        if not self.replays:  # (a wake with no replay makes no list)
            return []
        return [replay.state for replay in self.replays.values() if replay.state is not None]

    def prepare(self, batch: Batch) -> None:
        for state in self._states():
            state.prepare(batch)

    def written(self) -> None:
        for state in self._states():
            state.written()
        if self.reading:
            for replay in self.reading:
                replay.undo = None
            self.reading = []
        self.idle = not self.replays

    def failed(self) -> None:
        for state in self._states():
            state.failed()
        for replay in self.reading:
            if replay.undo is not None:
                record = replay.record
                record.written, record.position, record.state, seqs = replay.undo
                replay.area.present.difference_update(seqs)
                replay.undo = None
        self.reading = []

    # -- the monitor's verbs ---------------------------------------------------------

    def verbs(self) -> dict[bytes, Verb]:
        return {b"REPLAY": self._guarded(self._replay), b"REPLAYS": self._guarded(self._list)}

    @staticmethod
    def _guarded(verb: Verb) -> Verb:
        def answer(arguments: list[bytes], now: Now) -> bytes:
            try:
                return verb(arguments, now)
            except (ValueError, DecodeError, StoreError, ArchiveError) as exc:
                return f"ERROR: {exc}".encode()
        return answer

    def _replay(self, arguments: list[bytes], now: Now) -> bytes:
        request = parse_request(arguments)
        if isinstance(request, Cancel):
            return self._cancel(request.replay_id).encode()
        group = named_group(self.topics, request.topic, request.group)
        return self.begin(group, request.first, request.last, request.asked, now).encode()

    def begin(self, group: Group, first: Bound, last: Bound | None, asked: dict[str, str],
              now: Now) -> str:
        """A replay of ``group``'s topic's archive from ``first`` to ``last``: its line,
        or ValueError (no archive, nothing in the range, an offset that is no record's
        start)."""
        if not self.logs.present:
            raise ValueError("this node has no --archive-dir: there is no archive to replay")
        topic = group.topic.name
        log_ = self.logs.log(topic)
        if log_ is None:
            raise ValueError(f"nothing to replay: topic {topic} has no archive on this node")
        try:
            found = resolve(log_, first, last, group.takes)
        except OSError as exc:  # a segment deleted from under the node: its reader stops so too
            raise ArchiveUnreadable(f"cannot read the archive of topic {topic}: {exc.strerror} "
                             f"({exc.filename}); were its files deleted? A start of the node "
                             "reads which are left") from None
        if not found.expected:
            raise ValueError(f"nothing to replay: the archive of topic {topic} holds no "
                             f"message {range_words(asked)} (byte offsets {found.start} to "
                             f"{found.end})")
        replay = self._create(group, found, asked, now)
        about = (f"about {messages(found.expected)} (an estimate)" if found.estimated
                 else messages(found.expected))
        log.info("replay_started", replay=replay.record.id, topic=topic, group=group.name,
                 start=found.start, end=found.end, expected=found.expected)
        return (f"replay {replay.record.id} of topic {topic} group {group.name}: {about} "
                f"from archive byte offset {found.start} to {found.end}\n")

    def _create(self, group: Group, found: Resolved, asked: dict[str, str],
                now: Now) -> Replay:
        record = ReplayRecord(self._new_id(), group.topic.name, group.name, found.start,
                              found.end, found.start, found.from_us, found.to_us,
                              expected=found.expected, estimated=found.estimated,
                              created_us=now.wall_us, asked=asked)
        batch = self.store.begin()
        record.save(batch)
        self.store.commit(batch)
        return self._add(record, ReplayArea(self.store, record), group)

    def _new_id(self) -> str:
        while True:
            candidate = os.urandom(4).hex()
            if candidate.encode() not in self.replays \
                    and candidate.encode() != self.store.node_id:
                return candidate

    def from_time(self, group: Group, since_us: int, now: Now) -> str:
        """A seek to ``since_us``: the archive's messages of the group's topic stored
        since then, replayed (what the store holds is the seek's); "" if none."""
        if not self.logs.present or self.logs.log(group.topic.name) is None:
            return ""
        try:
            line = self.begin(group, Bound(time_us=since_us), None,
                              {"from": str(since_us)}, now)
        except ArchiveUnreadable as exc:
            return f"; from the archive: nothing, {exc}"
        except ValueError:
            return ""
        return "; from the archive: " + line

    def _cancel(self, replay_id: str) -> str:
        replay = self.replays.get(replay_id.encode())
        if replay is None:
            known = ", ".join(sorted(key.decode() for key in self.replays)) or "none"
            raise ValueError(f"no replay {replay_id[:40]!r} (replays: {known})")
        record, area = replay.record, replay.area
        left = area.left
        self._delete(record, area)
        del self.replays[area.node_id]
        if replay.state is not None:
            self._drop_state(replay)
        log.info("replay_cancelled", replay=record.id, topic=record.topic,
                 group=record.group, left=left)
        return (f"cancelled replay {record.id} of topic {record.topic} group {record.group}: "
                f"{messages(left)} read and not acked deleted\n")

    def _list(self, arguments: list[bytes], now: Now) -> bytes:
        topic = arguments[0].decode(errors="replace") if arguments else None
        if len(arguments) > 1:
            raise ValueError("usage: REPLAYS [topic]")
        if topic is not None and topic not in self.topics.topics:  # a typo: not "none"
            known = ", ".join(sorted(self.topics.topics)) or "none yet"
            raise ValueError(f"no topic {topic[:60]!r} (topics: {known})")
        lines = [replay.line() for replay in self.replays.values()
                 if topic is None or replay.record.topic == topic]
        return ("\n".join(sorted(lines)) + "\n").encode() if lines else b"no replays\n"

    def figures(self, now: Now) -> Figures:
        if not self.replays:
            return {}
        return {"replays": {replay.record.id: {
            "topic": replay.record.topic, "group": replay.record.group,
            "read": replay.record.written, "acked": replay.area.acked,
            "left": replay.area.left, "state": replay.record.state}
            for replay in self.replays.values()}}

