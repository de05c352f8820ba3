"""What a take of producer messages (pzq.node.intake) works with: the limits it
checks, what a header group says, and what it stored."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from pzq.node.batch_acks import OpenBatch
from pzq.protocol.batch_runs import MemberRun
from pzq.protocol.time_headers import MessageTimes
from pzq.store.batch import Batch
from pzq.store.record import Stored
from pzq.store.topics import Topic, Topics


@dataclass(frozen=True)
class IntakeLimits:
    batch_size: int  # most messages read in one wake
    max_message_size: int
    max_messages: int  # 0: no limit
    max_bytes: int  # 0: no limit
    dedup_window_us: int = 120_000_000  # a topic's DEDUP-IDs are remembered this long


def unpaced() -> int:
    return 0  # a take's pace: none (pzq.node.intake.Intake.take)


class HeaderFacts(NamedTuple):
    """What the node reads of a message's headers (pzq.protocol.headers)."""

    topic: Topic
    tag: bytes
    dedup_id: bytes | None
    key: bytes | None  # a partitioned topic's
    moved: str | None  # a key's partition is another node's: the refusal naming it
    times: MessageTimes  # its due time, expiry and priority (pzq.protocol.time_headers)
    room_limited: bool  # a limit of room to check (--max-messages, --max-bytes, the topic's)
    # None of the above asks a look at each message (``together``), at the take's time
    plain: bool


class Accepted:
    """A take's stored messages: those sent alone (answered each on its own) and a
    produce batch's runs stored together (answered together)."""

    def __init__(self) -> None:
        self.alone: list[Stored] = []
        # Each run: its batch, its members, their seqs and records (each one's Stored
        # made only when asked for: its ACK is the run's, by its first member and size)
        self.runs: list[tuple[OpenBatch, MemberRun, range, Sequence[bytes]]] = []
        self.in_runs = 0  # messages in the runs

    def __len__(self) -> int:
        return len(self.alone) + self.in_runs

    def every(self) -> list[Stored]:
        every = list(self.alone)
        for open_batch, run, seqs, values in self.runs:
            every += zip(repeat(open_batch.routing_id), run.tokens(open_batch.batch_id),
                         seqs, values)
        return every


NOTHING_ACCEPTED = Accepted()  # (never added to: a take makes its own)


class StoredRun:
    """Messages of one topic and tag stored in a row: they go to the topic's log and
    counts together (a produce batch's, mostly)."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics
        self.topic: Topic | None = None
        self.tag = b""
        self.seqs: list[int] = []
        self.size = 0

    def note(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int) -> None:
        """``note_seqs`` of one (a message sent alone: no tuple, no calls but the
        flush of a run of another topic or tag)."""
        if topic is not self.topic or tag != self.tag:
            if self.topic is not None:
                self.flush(batch)
            self.topic, self.tag = topic, tag
        self.seqs.append(seq)
        self.size += size

    def note_seqs(self, batch: Batch, seqs: Iterable[int], topic: Topic, tag: bytes,
                  size: int) -> None:
        """``note`` of many at once."""
        if topic is not self.topic or tag != self.tag:
            self.flush(batch)
            self.topic, self.tag = topic, tag
        self.seqs += seqs
        self.size += size

    def flush(self, batch: Batch) -> None:
        if self.topic is not None and self.seqs:
            self.topics.note_new_run(batch, self.topic, self.tag, self.seqs, self.size)
        self.topic, self.seqs, self.size = None, [], 0


def together(topic: Topic, dedup_id: bytes | None, times: MessageTimes, room_limited: bool,
             now_us: int) -> bool:
    """Whether messages with these headers need no look at each: no DEDUP-ID, no
    due time, expiry or priority, no partitions and no limit of room to check (what
    HeaderFacts.plain says, read once a take)."""
    return (dedup_id is None and not topic.partitions
            and times.due_us <= now_us and not times.expires_us
            and not (times.priority and topic.priorities)
            and not room_limited)
