"""Administration of topics and consumer groups over the monitor socket (pzq-ctl).

    TOPICS                                       every topic with its groups
    DECLARE TOPIC name [max_messages=N] [max_bytes=B] [dedup_window=D]
    DECLARE GROUP topic group [start=earliest|latest|µs] [filter=F]
                  [ack_timeout=D] [max_deliveries=N] [backoff=D,D,...]
    REMOVE TOPIC name                            its messages and groups go
    REMOVE GROUP topic group                     what only it held goes (default too)
    EMPTY TOPIC name                             its messages go, its groups stay
    EMPTY GROUP topic group                      the group is done with what is stored
    SEEK GROUP topic group to=WHERE              deliver from WHERE on: earliest, latest,
                                                 µs since the epoch, or a message key
    PENDING GROUP topic group [limit=N]          what the group has out or waiting again

REMOVE and EMPTY walk the topic's messages once (its log, and the own messages below
it for a topic without named groups or whose backfill is under way; an operator's
command, not the hot path) and write one batch. In a cluster the holders of copies are
told in that batch (``Tell``): a message deleted goes from every holder (REMOVE), one a
group is now done with is marked done for it there (DONE), so a takeover does not
deliver again what an operator removed; the change of groups reaches them in TOPICS.
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.admin import group_ops
from pzq.admin.node_admin import Verb
from pzq.clock import Now
from pzq.cluster.placement import MOST_PARTITIONS
from pzq.delivery.state import DeliveryState
from pzq.durations import duration_us
from pzq.errors import DecodeError, StoreError
from pzq.protocol import consume as consume_wire
from pzq.protocol.message_keys import parse_message_key
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.serving.consume_endpoint import NamedGroups
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topic_model import MOST_BACKOFF_STEPS
from pzq.store.topics import DEFAULT_ALL, DEFAULT_GROUP_ID, Group, Topic, Topics

Clock = Callable[[], Now]  # read once per verb: time is passed in
# batch, own messages deleted, a group, own messages that group is now done with:
# owed to the holders of their copies in the batch that deletes or marks them
Tell = Callable[[Batch, list[int], str, list[int]], None]


def tell_nobody(batch: Batch, removed: list[int], group: str, done: list[int]) -> None:
    """A node without a cluster: nobody holds copies."""


class TopicAdmin:
    def __init__(self, store: Store, topics: Topics, consume: NamedGroups,
                 default: DeliveryState, clock: Clock, tell: Tell = tell_nobody) -> None:
        self.store = store
        self.tell = tell
        self.topics = topics
        self.consume = consume  # the named groups of --consume-dsn
        self.default = default  # ``default``'s delivery state (--send-dsn)
        self.clock = clock

    def verbs(self, node_pending: Verb) -> dict[bytes, Verb]:
        """The verbs of topics and groups; PENDING without GROUP is ``node_pending``."""
        group_pending = self._guarded(self._pending)

        def pending(arguments: list[bytes]) -> bytes:
            return group_pending(arguments) if arguments else node_pending(arguments)

        return {b"TOPICS": self._list, b"DECLARE": self._guarded(self._declare),
                b"REMOVE": self._guarded(self._remove), b"EMPTY": self._guarded(self._empty),
                b"SEEK": self._guarded(self._seek), b"PENDING": pending}

    def _guarded(self, verb: Verb) -> Verb:
        def answer(arguments: list[bytes]) -> bytes:
            try:
                return verb([argument for argument in arguments])
            except (ValueError, DecodeError, StoreError) as exc:
                return f"ERROR: {exc}".encode()
        return answer

    # -- questions ---------------------------------------------------------------

    def _list(self, arguments: list[bytes]) -> bytes:
        """A line per topic; under it a line per named group and per consumer."""
        lines = []
        now = self.clock()
        for topic in sorted(self.topics.topics.values(), key=lambda found: found.name):
            groups = [DEFAULT_GROUP] if topic.default_reads else []
            groups += sorted(topic.groups)
            lines.append(f"{topic.name} messages={max(0, topic.messages)} "
                         f"bytes={max(0, topic.stored_bytes)} groups={','.join(groups)}"
                         + (" default=unclaimed" if topic.default_takes_unclaimed else "")
                         + _limits(topic))
            for name in sorted(topic.groups):
                lines += self._group_lines(topic.groups[name], now)
        return ("\n".join(lines) + "\n").encode() if lines else b"no topics\n"

    def _group_lines(self, group: Group, now: Now) -> list[str]:
        deliveries = self.consume.groups.get(group.id)
        if deliveries is None:
            return [f"  group {group.name} backlog={max(0, group.backlog)} consumers=0"]
        lines = [f"  group {group.name} backlog={max(0, group.backlog)} "
                 f"lag={deliveries.lag()} inflight={len(deliveries.state.inflight)} "
                 f"ready={len(deliveries.state.ready)} consumers={len(deliveries.consumers)}"]
        for consumer in deliveries.consumers:
            lines.append(f"    consumer {consumer.routing_id.hex()} held={len(consumer.held)} "
                         f"window={consumer.window} "
                         f"idle_ms={round(consumer.idle_seconds(now.mono) * 1000)}")
        return lines

    # -- the verbs ---------------------------------------------------------------

    def _declare(self, arguments: list[bytes]) -> bytes:
        """Every option is read and checked before anything is made or changed: a
        refused declare leaves no topic or group behind."""
        kind, names, options = _parse(arguments, b"DECLARE")
        if kind == "TOPIC":
            _count(names, 1, "DECLARE TOPIC name [max_messages=N] [max_bytes=B] "
                             "[dedup_window=D] [partitions=P]")
            partitions = _partitions(options.pop("partitions", None))
            limits = topic_settings_given(options)
            _no_more(options)
            return self._declare_topic(names[0], partitions, limits).encode()
        _count(names, 2, "DECLARE GROUP topic group [start=...] [filter=...]")
        topic = self._topic(names[0])
        _same_filter(topic, names[1], options.get("filter"))
        start, pattern = options.pop("start", "earliest"), options.pop("filter", "")
        subscribe = consume_wire.Subscribe(topic.name, names[1], 1, pattern,
                                           consume_wire.decode_start(start))
        settings = group_settings_given(options)
        _no_more(options)
        batch = self.store.begin()
        reply = self._declare_group(batch, topic, subscribe, settings)
        self.store.commit(batch)
        return reply.encode()

    def _declare_topic(self, name: str, partitions: int | None,
                       settings: dict[str, int]) -> str:
        existing = self.topics.topics.get(name)
        if existing is not None and partitions is not None:
            self.topics.check_partitions(existing, partitions)
        topic = self.topics.topic(name, self.clock().wall_us)
        for field, value in settings.items():
            setattr(topic, field, value)
        if partitions is not None:  # the peers learn it with the next heartbeat
            self.topics.partition(topic, partitions)
        self.topics.changed(topic)
        return f"topic {topic.name}{_limits(topic)}\n"

    def _declare_group(self, batch: Batch, topic: Topic, subscribe: consume_wire.Subscribe,
                       settings: dict[str, object]) -> str:
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
                                            subscribe.filter, self.clock().wall_us)
            reply = f"group {group.name} of topic {topic.name} start_seq={group.start_seq}"
        elif not settings:
            return f"group {name} of topic {topic.name} exists already\n"
        else:
            reply = f"group {name} of topic {topic.name}"
        if settings:
            for field, value in settings.items():
                setattr(group, field, value)
            batch.put(keyspace.group_key(topic.id, name.encode()), group.encode())
            self.consume.settings_changed(group)
        return reply + group.settings_text() + "\n"

    def _remove(self, arguments: list[bytes]) -> bytes:
        kind, names, options = _parse(arguments, b"REMOVE")
        _no_more(options)
        if kind == "TOPIC":
            _count(names, 1, "REMOVE TOPIC name")
            topic = self._topic(names[0])
            deleted = self._walk(topic, lambda seq, tag: True, drop_groups=tuple(topic.groups))
            self.topics.forget_topic(topic)
            return f"removed topic {topic.name}: {deleted} messages\n".encode()
        _count(names, 2, "REMOVE GROUP topic group")
        topic = self._topic(names[0])
        if names[1] == DEFAULT_GROUP:
            topic.remove_default()
            self.topics.changed(topic)
            deleted = self._walk(topic, self._releasable(topic, DEFAULT_GROUP_ID))
        else:
            group = self._group(topic, names[1])
            del topic.groups[group.name]
            deleted = self._walk(topic, self._releasable(topic, group.id),
                                 drop_groups=(group.name,), removed=(group,))
            self.default.rewind()  # what no named group holds now is ``default``'s
        return f"removed group {names[1]} of topic {topic.name}: {deleted} messages " \
               "deleted\n".encode()

    def _empty(self, arguments: list[bytes]) -> bytes:
        kind, names, options = _parse(arguments, b"EMPTY")
        _no_more(options)
        if kind == "TOPIC":
            _count(names, 1, "EMPTY TOPIC name")
            topic = self._topic(names[0])
            deleted = self._walk(topic, lambda seq, tag: True)
            return f"emptied topic {topic.name}: {deleted} messages\n".encode()
        _count(names, 2, "EMPTY GROUP topic group")
        topic = self._topic(names[0])
        group_id = (DEFAULT_GROUP_ID if names[1] == DEFAULT_GROUP
                    else self._group(topic, names[1]).id)
        done = self._mark_all_done(topic, group_id, names[1])
        return f"emptied group {names[1]} of topic {topic.name}: {done} messages\n".encode()

    def _seek(self, arguments: list[bytes]) -> bytes:
        topic, group, options = self._named_group(arguments, b"SEEK",
                                                  "SEEK GROUP topic group to=WHERE")
        where = options.pop("to", None)
        _no_more(options)
        if where is None:
            raise ValueError("SEEK needs to=earliest|latest|<µs since the epoch>|<key>")
        target = self._seek_target(topic, where)
        batch = self.store.begin()
        moved = group_ops.seek(self.store, self.topics, batch, group, target)
        self.tell(batch, moved.deleted, group.name, moved.marked)
        self.store.commit(batch)
        deliveries = self.consume.groups.get(group.id)
        if deliveries is not None:
            group_ops.let_go_below(deliveries, target)
        return (f"group {group.name} of topic {topic.name} at seq {target}: "
                f"{len(moved.deleted) + len(moved.marked)} now done, "
                f"{len(moved.to_deliver)} to be delivered\n").encode()

    def _seek_target(self, topic: Topic, where: str) -> int:
        """The seq a seek goes to."""
        if where == consume_wire.START_WORDS[0]:
            return 0
        if where == consume_wire.START_WORDS[1]:
            return self.store.next_seq
        if where.isdigit():
            return self.topics.first_stored_since(topic, int(where))
        try:
            node_id, seq = parse_message_key(where.encode())
        except DecodeError:
            raise ValueError(f"to={where[:40]!r} is not earliest, latest, µs since the "
                             "epoch or a message key") from None
        if node_id != self.store.node_id:
            raise ValueError(f"{where} is another node's message; seek on that node")
        return seq

    def _pending(self, arguments: list[bytes]) -> bytes:
        topic, group, options = self._named_group(arguments, b"PENDING",
                                                  "PENDING GROUP topic group [limit=N]")
        limit = _number(options.pop("limit", group_ops.PENDING_LIST), "limit")
        _no_more(options)
        deliveries = self.consume.groups.get(group.id)
        lines = ([] if deliveries is None
                 else group_ops.pending_lines(deliveries, self.clock().wall_us, limit))
        out = sum(" out " in line for line in lines)
        head = (f"group {group.name} of topic {topic.name}: {out} out, "
                f"{len(lines) - out} waiting\n")
        return (head + "".join(line + "\n" for line in lines)).encode()

    def _named_group(self, arguments: list[bytes], verb: bytes,
                     usage: str) -> tuple[Topic, Group, dict[str, str]]:
        kind, names, options = _parse(arguments, verb)
        if kind != "GROUP":
            raise ValueError(f"usage: {usage}")
        _count(names, 2, usage)
        topic = self._topic(names[0])
        if names[1] == DEFAULT_GROUP:
            raise ValueError("default is the consumers on --send-dsn, in arrival order; "
                             "name a group of --consume-dsn")
        return topic, self._group(topic, names[1]), options

    # -- walks of a topic's log ----------------------------------------------------

    def _releasable(self, topic: Topic, gone: int) -> Callable[[int, bytes], bool]:
        """After ``gone`` left: a message no remaining holder still needs."""
        def check(seq: int, tag: bytes) -> bool:
            return all(self.topics.is_done(holder, seq) for holder in topic.holders(seq, tag)
                       if holder != gone)
        return check

    def _walk(self, topic: Topic, delete: Callable[[int, bytes], bool],
              drop_groups: tuple[str, ...] = (), removed: tuple[Group, ...] = ()) -> int:
        """Delete the topic's messages ``delete`` picks, with their marks, in one batch."""
        batch = self.store.begin()
        holders_of = {group.id for group in (*topic.groups.values(), *removed)}
        holders_of.add(DEFAULT_GROUP_ID)
        deleted = []
        for seq, tag in self.topics.walk(topic):
            if not delete(seq, tag):
                continue
            value = self.store.get_own(seq)
            if value is not None:
                batch.delete_message(seq, len(value))
                self.topics.counts.count(topic, -1, -len(value))
                self._out_of_backlogs(topic, seq, tag)
            if topic.log_from is not None:
                batch.delete(keyspace.topic_log_key(topic.id, seq))
            for holder in holders_of:
                batch.delete(keyspace.group_done_key(holder, seq))
                batch.delete(keyspace.group_count_key(holder, seq))
            deleted.append(seq)
        self.tell(batch, deleted, DEFAULT_GROUP, [])
        for group in removed:
            batch.delete(keyspace.group_key(topic.id, group.name.encode()))
            batch.delete(keyspace.counts_key(group.id))
            batch.delete(keyspace.delivered_key(group.id))
            for prefix in (keyspace.group_done_prefix(group.id),
                           keyspace.group_count_prefix(group.id)):
                for key, _ in self.store.iterate(prefix, values=False):
                    batch.delete(key)
        self.store.commit(batch)
        self.topics.group_removed()
        self._let_go(topic, deleted, drop_groups)
        return len(deleted)

    def _out_of_backlogs(self, topic: Topic, seq: int, tag: bytes) -> None:
        if not self.topics.counted(topic, seq):
            return
        for group in topic.groups.values():
            if group.holds(seq, tag) and not self.topics.is_done(group.id, seq):
                self.topics.counts.count_group(group, -1)

    def _let_go(self, topic: Topic, deleted: list[int], drop_groups: tuple[str, ...]) -> None:
        """Deleted messages and removed groups leave delivery."""
        for seq in deleted:
            self.default.forget(seq)
            self.consume.forget(seq)
        for name in drop_groups:
            self.consume.drop_group(topic, name)

    def _mark_all_done(self, topic: Topic, group_id: int, name: str) -> int:
        batch = self.store.begin()
        deleted: list[int] = []  # the group was the last holder
        marked: list[int] = []  # other groups still hold them
        for seq, tag in self.topics.walk(topic):
            if group_id in topic.holders(seq, tag) and not self.topics.is_done(group_id, seq):
                value = self.store.get_own(seq)
                if value is not None:
                    gone = self.topics.done(batch, seq, topic, tag, len(value), group_id)
                    batch.delete(keyspace.group_count_key(group_id, seq))
                    (deleted if gone else marked).append(seq)
        self.tell(batch, deleted, name, marked)
        self.store.commit(batch)
        self.forget_for(group_id)
        return len(deleted) + len(marked)

    def forget_for(self, group_id: int) -> None:
        """The group's deliveries in memory are done with: let them go."""
        if group_id == DEFAULT_GROUP_ID:
            return
        found = self.consume.groups.get(group_id)
        if found is not None:
            state = found.state
            for seq in [*state.inflight.entries(), *state.ready.entries(),
                        *state.delayed.entries()]:
                found.state.forget(seq.seq)
                found.release((found.state.area.node_id, seq.seq))

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


def _same_filter(topic: Topic, name: str, given: str | None) -> None:
    """A declare of a group that exists, naming another filter than the group's, is
    refused rather than answered "exists already" with the filter ignored."""
    group = topic.groups.get(name)
    if group is not None and given is not None and given != group.filter:
        held = f"the filter {group.filter}" if group.filter else "no filter"
        raise ValueError(f"group {name} of topic {topic.name} exists with {held}, "
                         f"not {given}; remove the group to declare it anew")


def _parse(arguments: list[bytes], verb: bytes) -> tuple[str, list[str], dict[str, str]]:
    """(TOPIC or GROUP, names, name=value options)."""
    words = [argument.decode(errors="replace") for argument in arguments]
    if not words or words[0].upper() not in ("TOPIC", "GROUP"):
        raise ValueError(f"{verb.decode()} TOPIC ... or {verb.decode()} GROUP ...")
    names = [word for word in words[1:] if "=" not in word]
    options = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    return words[0].upper(), names, options


def _count(names: list[str], wanted: int, usage: str) -> None:
    if len(names) != wanted:
        raise ValueError(f"usage: {usage}")


def _no_more(options: dict[str, str]) -> None:
    if options:
        raise ValueError(f"unknown option {sorted(options)[0]!r}")


def _number(value: int | str, name: str) -> int:
    if isinstance(value, int):
        return value
    if not value.isdigit():
        raise ValueError(f"{name}={value[:20]} is not a whole number 0 or more")
    return int(value)


def topic_settings_given(options: dict[str, str]) -> dict[str, int]:
    """A topic's own limits among DECLARE TOPIC's options (taken out), as Topic fields."""
    found: dict[str, int] = {}
    for name in ("max_messages", "max_bytes"):
        if name in options:
            found[name] = _number(options.pop(name), name)
    if "dedup_window" in options:
        found["dedup_window_us"] = _duration(options.pop("dedup_window"))
    return found


def group_settings_given(options: dict[str, str]) -> dict[str, object]:
    """A group's own delivery settings among DECLARE GROUP's options (taken out)."""
    found: dict[str, object] = {}
    if "ack_timeout" in options:
        found["ack_timeout_us"] = _duration(options.pop("ack_timeout"), "ack_timeout")
    if "max_deliveries" in options:
        found["max_deliveries"] = _number(options.pop("max_deliveries"), "max_deliveries")
    if "backoff" in options:
        steps = [step for step in options.pop("backoff").split(",") if step]
        if not 0 < len(steps) <= MOST_BACKOFF_STEPS:
            raise ValueError(f"backoff takes 1 to {MOST_BACKOFF_STEPS} durations, "
                             "separated by ',' (e.g. 1s,10s,1m)")
        found["backoff_us"] = tuple(_duration(step, "backoff") for step in steps)
    return found


def _duration(text: str, name: str = "dedup_window") -> int:
    """A duration setting (``10m``), above 0."""
    found = duration_us(text)
    if found <= 0:
        raise ValueError(f"{name} {text[:20]!r} must be above 0")
    return found


def _partitions(given: str | None) -> int | None:
    if given is None:
        return None
    partitions = _number(given, "partitions")
    if not 1 <= partitions <= MOST_PARTITIONS:
        raise ValueError(f"partitions must be from 1 to {MOST_PARTITIONS}")
    return partitions


def _limits(topic: Topic) -> str:
    settings = (("max_messages", topic.max_messages), ("max_bytes", topic.max_bytes),
                ("dedup_window_us", topic.dedup_window_us), ("partitions", topic.partitions))
    return "".join(f" {name}={value}" for name, value in settings if value)
