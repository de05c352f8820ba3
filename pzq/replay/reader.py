"""A chunk of a replay's range, read from the archive as store records.

Each archived message becomes the record it was stored as (pzq.store.record): its
producer's msg id, its header frames (its TOPIC, and the others the archive kept
for it), its parts and its store time, with no deliveries yet. Damaged records are
skipped (the archive's readers report them); a torn tail ends the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.records import Damaged, MessageRecord, walk
from pzq.archive.tier.topiclog import TopicLog
from pzq.protocol.headers import TOPIC_HEADER
from pzq.replay.range import Takes, wanted
from pzq.store import record

READ_BYTES = 1 << 20  # archive bytes one chunk reads at most


@dataclass
class Chunk:
    records: list[bytes]  # store records, in archive order
    position: int  # where the next chunk starts


def read_chunk(log: TopicLog, position: int, end: int, most: int, from_us: int,
               to_us: int, takes: Takes) -> Chunk:
    """Up to ``most`` records of the range from ``position``, and where the next read
    starts (past what was looked at, never further)."""
    if position < log.start_offset:  # retention deleted what was not read yet
        position = log.start_offset
    records: list[bytes] = []
    if position >= end:
        return Chunk(records, position)
    data = log.read(position, READ_BYTES, up_to=end)
    for item in walk(data, base=position):
        if isinstance(item, MessageRecord):
            if len(records) >= most:
                return Chunk(records, item.offset)
            if wanted(item.message, from_us, to_us, takes):
                records.append(stored_record(item.message))
            position = item.offset + item.size
        elif isinstance(item, Damaged):
            position = item.offset + item.size
        else:
            break  # a torn tail: the next read looks again
    return Chunk(records, position)


def stored_record(message: ArchivedMessage) -> bytes:
    """The message as the store keeps it, delivered as produced."""
    headers = (TOPIC_HEADER + message.topic.encode(), *message.headers)
    return record.encode(message.msg_id, headers, message.parts, message.stored_us)
