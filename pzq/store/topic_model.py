"""What a topic and a consumer group are, and who of them holds a message.

A group *holds* a message of its topic when the message's seq is at or past the
group's start and the group's filter takes its tag. What ``default`` (the consumers
on --send-dsn) holds is the topic's ``default_rule``:
- ``unclaimed`` (a new topic): the messages no named group holds, so every message
  while the topic has no named group. A topic read by named groups alone keeps no
  copy for a ``default`` nobody reads, and no message is left without a reader (a
  removed group's messages that no other group holds are ``default``'s again).
- ``all``: those, and every message from ``default_from`` on, beside the named
  groups. A topic gets it when ``default`` is declared for it (from the next message
  on), or when a consumer on --send-dsn ACKs one of its messages while it has no
  named group (it is read there), and every topic of a store from before the rule
  has it, so an upgrade lets nothing go.
- ``none``: nothing; an operator took the topic away from --send-dsn.

A topic keeps a log (``i <topic> <seq>``, see pzq.store.topic_log) only once it has
a named group: ``log_from`` is the seq from which its log is complete (None: no log;
``default`` reads the own messages in arrival order and needs none, so the single
queue pays nothing for the logs).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from pzq.bulk import lowest
from pzq.protocol.headers import validate_topic
from pzq.protocol.topic_reads import DEFAULT_GROUP

DEFAULT_GROUP_ID = 0  # the group DEFAULT_GROUP (named in the protocol)
FIRST_ID = 1
START_EARLIEST = "earliest"
START_LATEST = "latest"
COUNTS = struct.Struct(">qq")  # topic: messages, bytes; group: backlog, floor
ON_EXPIRE_DEAD = "dead"  # an expired message goes to the dead letters (reason expired)
ON_EXPIRE_DROP = "drop"  # it is deleted
ON_EXPIRE = (ON_EXPIRE_DEAD, ON_EXPIRE_DROP)
MOST_BACKOFF_STEPS = 32  # a group's backoff: one wait per delivery, the last repeated


@dataclass(eq=False)
class Group:
    topic: Topic
    name: str
    id: int
    start_seq: int
    filter: str = ""  # "": every tag; "eu-*": tags starting with "eu-"; else that tag
    created_us: int = 0
    backlog: int = 0  # stored messages it holds and is not done with
    floor: int = 0  # done with every message below this: a restart reads on from here
    delivered_below: int = 0  # first deliveries went this far (told to the peers)
    # Its own delivery settings (None or (): the node's --ack-timeout, --max-deliveries,
    # and no backoff).
    ack_timeout_us: int | None = None
    max_deliveries: int | None = None
    backoff_us: tuple[int, ...] = ()

    def takes(self, tag: bytes) -> bool:
        return not self.filter or filter_takes(self.filter, tag)

    def holds(self, seq: int, tag: bytes) -> bool:
        # asked for every message stored and acked: no call when there is no filter
        return seq >= self.start_seq and (not self.filter or filter_takes(self.filter, tag))

    def encode(self) -> bytes:
        """Its settings; the counts that change with the batches are kept apart."""
        return json.dumps({"id": self.id, "start_seq": self.start_seq, "filter": self.filter,
                           "created_us": self.created_us, "ack_timeout_us": self.ack_timeout_us,
                           "max_deliveries": self.max_deliveries,
                           "backoff_us": list(self.backoff_us)}).encode()

    def settings_text(self) -> str:
        """Its own delivery settings, as DECLARE GROUP takes them (none: empty)."""
        found = [f"ack_timeout={self.ack_timeout_us}us" if self.ack_timeout_us else "",
                 f"max_deliveries={self.max_deliveries}" if self.max_deliveries is not None
                 else "",
                 "backoff=" + ",".join(f"{step}us" for step in self.backoff_us)
                 if self.backoff_us else ""]
        return "".join(f" {setting}" for setting in found if setting)


DEFAULT_ONLY = [DEFAULT_GROUP_ID]

# What ``default`` holds of a topic (Topic.default_rule, see above):
DEFAULT_UNCLAIMED = "unclaimed"
DEFAULT_ALL = "all"
DEFAULT_NONE = "none"


@dataclass(eq=False)
class Topic:
    name: str
    id: int
    messages: int = 0
    stored_bytes: int = 0
    default_from: int | None = 0  # None: ``default`` does not read this topic
    created_us: int = 0
    max_messages: int = 0  # QUEUE_FULL for this topic beyond these (0: no limit)
    max_bytes: int = 0
    groups: dict[str, Group] = field(default_factory=dict)
    received: int = 0  # messages taken since start (for its rate; not stored)
    log_from: int | None = None  # its log is complete from this seq on (None: no log)
    newest: int = -1  # the seq of its newest message stored while running (-1: unknown)
    dedup_window_us: int = 0  # how long a DEDUP-ID is remembered (0: the node's default)
    default_rule: str = DEFAULT_UNCLAIMED
    partitions: int = 0  # 0: not partitioned; else fixed once declared (pzq.cluster.placement)
    max_age_us: int = 0  # a message older than this expires (0: none; pzq.delivery.expiry)
    on_expire: str = ON_EXPIRE_DEAD  # what an expired message becomes: dead letter or gone
    ttl_expired: int = 0  # its messages expired since start (not stored)
    priorities: bool = False  # PRIORITY: 1-9 goes before the backlog (pzq.delivery.lanes)

    def log_wanted_from(self) -> int | None:
        """The lowest seq its log must reach back to: its named groups' earliest start
        (None: no named group, no log needed)."""
        return min((group.start_seq for group in self.groups.values()), default=None)

    def log_short(self) -> bool:
        """Its log does not yet reach back as far as a group needs (a backfill is due)."""
        wanted = self.log_wanted_from()
        return wanted is not None and (self.log_from is None or self.log_from > wanted)

    def encode(self) -> bytes:
        """Its settings; the counts that change with the batches are kept apart."""
        return json.dumps({"id": self.id, "default_from": self.default_from,
                           "created_us": self.created_us, "max_messages": self.max_messages,
                           "max_bytes": self.max_bytes, "log_from": self.log_from,
                           "dedup_window_us": self.dedup_window_us,
                           "default_rule": self.default_rule,
                           "partitions": self.partitions, "max_age_us": self.max_age_us,
                           "on_expire": self.on_expire,
                           "priorities": self.priorities}).encode()

    @property
    def default_reads(self) -> bool:
        """Whether ``default`` (--send-dsn) holds every new message of the topic (else
        none, or those no named group takes)."""
        return self.default_rule == DEFAULT_ALL or (self.default_rule == DEFAULT_UNCLAIMED
                                                    and not self.groups)

    @property
    def default_takes_unclaimed(self) -> bool:
        return self.default_rule == DEFAULT_UNCLAIMED and bool(self.groups)

    @property
    def default_reads_all(self) -> bool:
        """Whether ``default`` holds every message of the topic (the single queue's case)."""
        return self.default_reads and (not self.groups or self.default_from == 0)

    def keep_default(self, next_seq: int) -> None:
        """``default`` holds every new message beside the named groups, for good (not
        the older ones its groups hold: its reading passed them by)."""
        self.default_rule = DEFAULT_ALL
        if self.default_from is None or self.groups:
            self.default_from = max(self.default_from or 0, next_seq)

    def remove_default(self) -> None:
        self.default_rule = DEFAULT_NONE
        self.default_from = None

    def holder_names(self, seq: int, tag: bytes) -> tuple[str, ...]:
        """The names of the groups holding the message; () when only ``default`` does
        (the archive then says nothing more than it always did)."""
        if not self.groups:
            return ()
        names = {group.id: group.name for group in self.groups.values()}
        names[DEFAULT_GROUP_ID] = DEFAULT_GROUP
        return tuple(sorted(names[holder] for holder in self.holders(seq, tag)))

    def holder_names_all(self, seqs: list[int], tags: list[bytes]) -> list[tuple[str, ...]]:
        """``holder_names`` of each message (``seqs`` with their ``tags``): once a tag
        where who holds a message depends on its tag alone (an ACK's many, archived)."""
        if not self.groups:
            return [()] * len(seqs)
        settled_from = self.holders_settled_from()
        if lowest(seqs, settled_from) < settled_from:
            return list(map(self.holder_names, seqs, tags))
        names = {tag: self.holder_names(settled_from, tag) for tag in set(tags)}
        return list(map(names.__getitem__, tags))

    def holders_settled_from(self) -> int:
        """The seq from which who holds a message depends on its tag alone: every group
        has started there, and ``default`` too where it reads from a seq."""
        # asked once an ACK: a plain loop, no comprehension's frame nor a list
        # unpacked for ``max`` (some 5 100 instructions a call at three groups, 1 700)
        settled = self.default_from or 0
        for group in self.groups.values():
            if group.start_seq > settled:
                settled = group.start_seq
        return settled

    def holders(self, seq: int, tag: bytes) -> list[int]:
        """Ids of the groups that hold message ``seq`` (tagged ``tag``) of this topic."""
        if not self.groups:
            return DEFAULT_ONLY if self.default_rule != DEFAULT_NONE else []
        # Asked for every message stored and acked: Group.holds written out here, in
        # a plain loop (no comprehension's frame: some 5 300 instructions a call to
        # 3 500 at three groups).
        held = []
        for group in self.groups.values():
            if seq >= group.start_seq and (not group.filter
                                           or filter_takes(group.filter, tag)):
                held.append(group.id)
        if self.default_rule == DEFAULT_NONE:
            return held
        if not held or (self.default_rule == DEFAULT_ALL and self.default_from is not None
                        and seq >= self.default_from):
            held.append(DEFAULT_GROUP_ID)
        return held


def filter_takes(pattern: str, tag: bytes) -> bool:
    if not pattern:
        return True
    wanted = pattern.encode()
    if wanted.endswith(b"*"):
        return tag.startswith(wanted[:-1])
    return tag == wanted


def validate_name(kind: str, name: str) -> str:
    """Topic and group names follow the archive's topic names (they are directories)."""
    try:
        return validate_topic(name)
    except ValueError as exc:
        raise ValueError(str(exc).replace("topic", kind, 1)) from None
