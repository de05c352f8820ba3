"""Administration of topics and consumer groups over the monitor socket (pzq-ctl).

    TOPICS                                       every topic with its groups
    DECLARE TOPIC name [max_messages=N] [max_bytes=B] [dedup_window=D] [max_age=D]
                  [on_expire=dead|drop] [priorities=on|off]
    DECLARE GROUP topic group [start=earliest|latest|µs] [filter=F]
                  [ack_timeout=D] [max_deliveries=N] [backoff=D,D,...]
    REMOVE TOPIC name                            its messages and groups go
    REMOVE GROUP topic group                     what only it held goes (default too)
    EMPTY TOPIC name                             its messages go, its groups stay
    EMPTY GROUP topic group                      the group is done with what is stored
    SEEK GROUP topic group to=WHERE              deliver from WHERE on: earliest, latest,
                                                 µs since the epoch, or a message key; to a
                                                 time, the archive's messages stored since
                                                 are replayed to the group (pzq.replay)
    PENDING GROUP topic group [limit=N]          what the group has out or waiting again

REMOVE and EMPTY walk the topic's messages once (pzq.admin.topic_walks) and write one
batch. In a cluster the holders of copies are told in that batch: a message deleted
goes from every holder (REMOVE), one a group is now done with is marked done for it
there (DONE), so a takeover does not deliver again what an operator removed; the
change of groups reaches them in TOPICS. Every verb is given the wake's time.
"""

from __future__ import annotations

from typing import Protocol

from pzq.admin import group_ops
from pzq.admin.topic_walks import Holders, TopicWalks
from pzq.admin.topic_words import (
    count_names,
    group_settings_given,
    limits_text,
    no_more,
    number,
    parse_words,
    partitions_given,
    same_filter,
    start_not_applied,
    topic_settings_given,
)
from pzq.admin.usage import alone
from pzq.clock import Now, utc_time
from pzq.delivery.ages import TopicAges, age_seconds
from pzq.delivery.state import DeliveryState
from pzq.errors import DecodeError, StoreError
from pzq.parts import Verb
from pzq.protocol import consume as consume_wire
from pzq.protocol.message_keys import parse_message_key
from pzq.protocol.monitor_text import messages
from pzq.protocol.numbers import whole_number
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.serving.named_groups import NamedGroups
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.scheduled import ScheduledArea
from pzq.store.store import Store
from pzq.store.topics import DEFAULT_ALL, DEFAULT_GROUP_ID, Group, Topic, Topics


class ArchiveSeek(Protocol):
    """A seek to a time goes on into the archive (pzq.replay.part.Replays): the line
    saying what it replays, or ""."""

    def from_time(self, group: Group, since_us: int, now: Now) -> str: ...


class TopicAdmin:
    def __init__(self, store: Store, topics: Topics, consume: NamedGroups,
                 default: DeliveryState, holders: Holders, archive_seek: ArchiveSeek,
                 scheduled: ScheduledArea | None = None) -> None:
        self.store = store
        self.archive_seek = archive_seek
        self.scheduled = scheduled or ScheduledArea(store)  # DELAY:, NOT-BEFORE: waiting
        self.holders = holders
        self.topics = topics
        self.consume = consume  # the named groups of --consume-dsn
        self.default = default  # ``default``'s delivery state (--send-dsn)
        self.walks = TopicWalks(store, topics, consume, default, holders)
        self.ages = TopicAges(store, topics)

    def verbs(self, node_pending: Verb) -> dict[bytes, Verb]:
        """The verbs of topics and groups; PENDING without GROUP is ``node_pending``."""
        group_pending = self._guarded(self._pending)

        def pending(arguments: list[bytes], now: Now) -> bytes:
            return (group_pending if arguments else node_pending)(arguments, now)

        return {b"TOPICS": alone("TOPICS", self._list), b"DECLARE": self._guarded(self._declare),
                b"REMOVE": self._guarded(self._remove), b"EMPTY": self._guarded(self._empty),
                b"SEEK": self._guarded(self._seek), b"PENDING": pending}

    def _guarded(self, verb: Verb) -> Verb:
        def answer(arguments: list[bytes], now: Now) -> bytes:
            try:
                return verb([argument for argument in arguments], now)
            except (ValueError, DecodeError, StoreError) as exc:
                return f"ERROR: {exc}".encode()
        return answer

    # -- questions ---------------------------------------------------------------

    def _list(self, arguments: list[bytes], now: Now) -> bytes:
        """A line per topic; under it a line per named group and per consumer."""
        lines = []
        for topic in sorted(self.topics.topics.values(), key=lambda found: found.name):
            groups = [DEFAULT_GROUP] if topic.default_reads else []
            groups += sorted(topic.groups)
            lines.append(f"{topic.name} messages={max(0, topic.messages)} "
                         f"bytes={max(0, topic.stored_bytes)} groups={','.join(groups)}"
                         + (" default=unclaimed" if topic.default_takes_unclaimed else "")
                         + limits_text(topic) + self._scheduled_text(topic.name)
                         + self._oldest_text(topic, now))
            for name in sorted(topic.groups):
                lines += self._group_lines(topic.groups[name], now)
        return ("\n".join(lines) + "\n").encode() if lines else b"no topics\n"

    def _oldest_text(self, topic: Topic, now: Now) -> str:
        """`` oldest_seconds=S`` while the topic has messages stored."""
        if topic.messages <= 0:
            return ""
        return f" oldest_seconds={self.ages.oldest_seconds(now.wall_us).get(topic.name, 0)}"

    def _scheduled_text(self, topic: str) -> str:
        """`` scheduled=N next_due=<UTC time>`` while the topic has scheduled messages."""
        waiting = self.scheduled.counts.get(topic, 0)
        if not waiting:
            return ""
        due = utc_time(self.scheduled.next_due_us(topic) or 0)
        return f" scheduled={waiting} next_due={due.isoformat(timespec='milliseconds')}"

    def _group_lines(self, group: Group, now: Now) -> list[str]:
        deliveries = self.consume.groups.get(group.id)
        own = group.settings_text()  # its own ack timeout, ... (a consumer's info)
        if deliveries is None:
            return [f"  group {group.name} backlog={max(0, group.backlog)} consumers=0{own}"]
        oldest = deliveries.state.oldest_open() if group.backlog > 0 else None
        lag_s = f" lag_seconds={age_seconds(oldest[1], now.wall_us)}" if oldest else ""
        lines = [f"  group {group.name} backlog={max(0, group.backlog)} "
                 f"lag={deliveries.lag()} inflight={len(deliveries.state.inflight)} "
                 f"ready={len(deliveries.state.ready)} consumers={len(deliveries.consumers)}"
                 + lag_s + own]
        for consumer in deliveries.consumers:
            lines.append(f"    consumer {consumer.routing_id.hex()} held={consumer.held_count} "
                         f"window={consumer.window} "
                         f"idle_ms={round(consumer.idle_seconds(now.mono) * 1000)}")
        return lines

    # -- the verbs ---------------------------------------------------------------

    def _declare(self, arguments: list[bytes], now: Now) -> bytes:
        """Every option is read and checked before anything is made or changed: a
        refused declare leaves no topic or group behind."""
        kind, names, options = parse_words(arguments, b"DECLARE")
        if kind == "TOPIC":
            count_names(names, 1, "DECLARE TOPIC name [max_messages=N] [max_bytes=B] "
                                  "[dedup_window=D] [partitions=P] [max_age=D] "
                                  "[on_expire=dead|drop] [priorities=on|off]")
            partitions = partitions_given(options.pop("partitions", None))
            limits = topic_settings_given(options)
            no_more(options)
            return self._declare_topic(names[0], partitions, limits, now).encode()
        count_names(names, 2, "DECLARE GROUP topic group [start=...] [filter=...]")
        topic = self._topic(names[0])
        same_filter(topic, names[1], options.get("filter"))
        start_given = "start" in options
        start, pattern = options.pop("start", "earliest"), options.pop("filter", "")
        subscribe = consume_wire.Subscribe(topic.name, names[1], 1, pattern,
                                           consume_wire.decode_start(start))
        settings = group_settings_given(options)
        no_more(options)
        batch = self.store.begin()
        reply = self._declare_group(batch, topic, subscribe, settings, now, start_given)
        self.store.commit(batch)
        return reply.encode()

    def _declare_topic(self, name: str, partitions: int | None,
                       settings: dict[str, object], now: Now) -> str:
        existing = self.topics.topics.get(name)
        if existing is not None and partitions is not None:
            self.topics.check_partitions(existing, partitions)
        topic = self.topics.topic(name, now.wall_us)
        for field, value in settings.items():
            setattr(topic, field, value)
        if partitions is not None:  # the peers learn it with the next heartbeat
            self.topics.partition(topic, partitions)
        self.topics.changed(topic)
        return f"topic {topic.name}{limits_text(topic)}\n"

    def _declare_group(self, batch: Batch, topic: Topic, subscribe: consume_wire.Subscribe,
                       settings: dict[str, object], now: Now, start_given: bool) -> str:
        name = subscribe.group
        if name == DEFAULT_GROUP:
            if settings:
                raise ValueError("default's delivery settings are the node's options "
                                 "(--ack-timeout, --max-deliveries)")
            if topic.default_rule != DEFAULT_ALL:
                self.topics.keep_default(topic)
            return f"group {DEFAULT_GROUP} of topic {topic.name}\n"
        if not self.consume.served:
            raise ValueError("the node has no --consume-dsn: groups are read there")
        group = topic.groups.get(name)
        if group is None:
            group = self.consume.make_group(batch, topic, name, subscribe.start,
                                            subscribe.filter, now.wall_us)
            reply = f"group {group.name} of topic {topic.name} start_seq={group.start_seq}"
            note = ""
        else:
            reply = f"group {name} of topic {topic.name}"
            note = start_not_applied(subscribe.start if start_given else None)
            if not settings:
                return f"{reply} exists already{note}\n"
        if settings:
            for field, value in settings.items():
                setattr(group, field, value)
            batch.put(keyspace.group_key(topic.id, name.encode()), group.encode())
            self.consume.settings_changed(group)
        return reply + group.settings_text() + note + "\n"

    def _remove(self, arguments: list[bytes], now: Now) -> bytes:
        kind, names, options = parse_words(arguments, b"REMOVE")
        no_more(options)
        walks = self.walks
        if kind == "TOPIC":
            count_names(names, 1, "REMOVE TOPIC name")
            topic = self._topic(names[0])
            deleted = walks.delete(topic, lambda seq, tag: True, now.mono,
                                   drop_groups=tuple(topic.groups))
            self.topics.forget_topic(topic)
            return f"removed topic {topic.name}: {messages(deleted)}\n".encode()
        count_names(names, 2, "REMOVE GROUP topic group")
        topic = self._topic(names[0])
        if names[1] == DEFAULT_GROUP:
            topic.remove_default()
            self.topics.changed(topic)
            deleted = walks.delete(topic, walks.releasable(topic, DEFAULT_GROUP_ID), now.mono)
        else:
            group = self._group(topic, names[1])
            del topic.groups[group.name]
            deleted = walks.delete(topic, walks.releasable(topic, group.id), now.mono,
                                   drop_groups=(group.name,), removed=(group,))
            self.default.rewind()  # what no named group holds now is ``default``'s
        return f"removed group {names[1]} of topic {topic.name}: {messages(deleted)} " \
               "deleted\n".encode()

    def _empty(self, arguments: list[bytes], now: Now) -> bytes:
        kind, names, options = parse_words(arguments, b"EMPTY")
        no_more(options)
        if kind == "TOPIC":
            count_names(names, 1, "EMPTY TOPIC name")
            topic = self._topic(names[0])
            deleted = self.walks.delete(topic, lambda seq, tag: True, now.mono)
            return f"emptied topic {topic.name}: {messages(deleted)}\n".encode()
        count_names(names, 2, "EMPTY GROUP topic group")
        topic = self._topic(names[0])
        group_id = (DEFAULT_GROUP_ID if names[1] == DEFAULT_GROUP
                    else self._group(topic, names[1]).id)
        done = self.walks.mark_all_done(topic, group_id, names[1], now.mono)
        return f"emptied group {names[1]} of topic {topic.name}: {messages(done)}\n".encode()

    def _seek(self, arguments: list[bytes], now: Now) -> bytes:
        topic, group, options = self._named_group(arguments, b"SEEK",
                                                  "SEEK GROUP topic group to=WHERE")
        where = options.pop("to", None)
        no_more(options)
        if where is None:
            raise ValueError("SEEK needs to=earliest|latest|<µs since the epoch>|<key>")
        target = self._seek_target(topic, where)
        past = ""
        if target > self.store.next_seq:  # a key not stored yet: what comes next, as latest
            target, past = self.store.next_seq, f" (to={where} is past the last message " \
                "stored: as latest)"
        batch = self.store.begin_settled()
        moved = group_ops.seek(self.store, self.topics, batch, group, target)
        self.holders.tell_holders(batch, moved.deleted, group.name, moved.marked, now.mono)
        deliveries = self.consume.groups.get(group.id)
        if deliveries is not None:  # the waits it passed end with the seek's batch
            deliveries.state.waits.end_below(target, batch)
        self.store.commit(batch)
        if deliveries is not None:
            group_ops.let_go_below(deliveries, target)
        since = whole_number(where)
        archived = self.archive_seek.from_time(group, since, now) if since is not None \
            else ""
        # what changed, then the backlog from the target on (with what it held there
        # before: "0 brought back" alone read as nothing to deliver)
        return (f"group {group.name} of topic {topic.name} at seq {target}{past}: "
                f"{len(moved.deleted) + len(moved.marked)} now done, "
                f"{len(moved.to_deliver)} brought back, backlog {moved.backlog}"
                f"{archived.rstrip()}\n").encode()

    def _seek_target(self, topic: Topic, where: str) -> int:
        """The seq a seek goes to."""
        if where == consume_wire.START_WORDS[0]:
            return 0
        if where == consume_wire.START_WORDS[1]:
            return self.store.next_seq
        since = whole_number(where)
        if since is not None:
            return self.topics.first_stored_since(topic, since)
        try:
            node_id, seq = parse_message_key(where.encode())
        except DecodeError:
            raise ValueError(f"to={where[:40]!r} is not earliest, latest, µs since the "
                             "epoch or a message key") from None
        if node_id != self.store.node_id:
            raise ValueError(f"{where} is another node's message; seek on that node")
        return seq

    def _pending(self, arguments: list[bytes], now: Now) -> bytes:
        topic, group, options = self._named_group(arguments, b"PENDING",
                                                  "PENDING GROUP topic group [limit=N]")
        limit = number(options.pop("limit", group_ops.PENDING_LIST), "limit")
        no_more(options)
        deliveries = self.consume.groups.get(group.id)
        found = (group_ops.Pending([], 0, 0) if deliveries is None
                 else group_ops.pending(deliveries, now.wall_us, limit))
        head = (f"group {group.name} of topic {topic.name}: {found.out} out, "
                f"{found.waiting} waiting\n")
        return (head + "".join(line + "\n" for line in found.lines)).encode()

    def _named_group(self, arguments: list[bytes], verb: bytes,
                     usage: str) -> tuple[Topic, Group, dict[str, str]]:
        kind, names, options = parse_words(arguments, verb)
        if kind != "GROUP":
            raise ValueError(f"usage: {usage}")
        count_names(names, 2, usage)
        topic = self._topic(names[0])
        if names[1] == DEFAULT_GROUP:
            raise ValueError("default is the consumers on --send-dsn, in arrival order; "
                             "name a group of --consume-dsn")
        return topic, self._group(topic, names[1]), options

    # -- names -----------------------------------------------------------------------

    def _topic(self, name: str) -> Topic:
        topic = self.topics.topics.get(name)
        if topic is None:
            known = ", ".join(sorted(self.topics.topics)) or "none yet"
            raise ValueError(f"no topic {name[:60]!r} (topics: {known})")
        return topic

    @staticmethod
    def _group(topic: Topic, name: str) -> Group:
        group = topic.groups.get(name)
        if group is None:
            known = ", ".join(sorted(topic.groups)) or "none"
            raise ValueError(f"no group {name[:60]!r} in topic {topic.name} (groups: {known})")
        return group
