"""Produce protocol 2 on --receive-dsn: many messages in one multipart message, and one
ACK naming each one's result (docs/protocol.rst, "Produce batches").

A producer learns that the node speaks it from one ordinary message carrying the
header ``PROTOCOL:2`` (the node does not store that header; a node that does not know
it stores it as any header, which consumers ignore): the ACK of that message carries
the header frame ``PROTOCOL:2`` when the node speaks it. Only then does the producer
send batches::

    batch id | BATCH:n | (empty) | entries
    entries: for each message, msg id length:4 msg id header count:4 (length:4 header)*
             part count:4 (length:4 part)*        (numbers big-endian)

Each entry is the stored record's layout after its fixed fields, so the node stores
it as it came. The node answers the batch once every message in it has its answer::

    batch id | status | BATCH:n | (empty) | results
    results: for each message in order, status:1 ("1" or "0") length:2 status message

The first status is ``1`` when every message's is. A batch the node cannot read at
all (its frames or entries malformed) gets one ordinary ACK of the batch id with
``0``: none of its messages is stored.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

from pzq.errors import DecodeError, ProduceRefused
from pzq.protocol.batch_runs import Member, member_token, read_runs
from pzq.protocol.frame_groups import LENGTH
from pzq.protocol.frames import HEADERS_MAX, MSG_ID_MAX, STATUS_FAILED, STATUS_OK, Produce
from pzq.protocol.numbers import whole_number

PROTOCOL_HEADER = b"PROTOCOL:2"
BATCH = b"BATCH:"
MAX_MESSAGES = 10_000  # in one batch
# A producer sends its batch once the entries reach BATCH_BYTES, whatever their count:
# a batch is one frame, and a node reads no frame over its --max-frame-size (it closes
# the connection). So a batch is at most this plus one message: its body, and its id
# and headers (under HEADERS_MAX) with their lengths, within FRAME_ROOM of the body.
BATCH_BYTES = 1024 * 1024
FRAME_ROOM = BATCH_BYTES + 2 * HEADERS_MAX  # the least --max-frame-size over the body's
RESULT = struct.Struct(">cH")  # status, length of the status message
_STORED = (True, b"")  # the result of a message stored
_STORED_RESULT = RESULT.pack(STATUS_OK, 0)
_ONE = LENGTH.pack(1)  # a group of one frame


@dataclass(frozen=True, slots=True)
class BatchAck:
    """A batch's ACK as the producer's DEALER receives it: each message's result."""

    batch_id: bytes
    results: tuple[tuple[bool, bytes], ...]


def encode_entry(msg_id: bytes, headers: Sequence[bytes], parts: Sequence[bytes]) -> bytes:
    """One message of a batch: group_chunks' layout, each item's length packed in C."""
    pack = LENGTH.pack
    if len(headers) == 1 and len(parts) == 1:  # the common message: no iterators
        (header,), (part,) = headers, parts
        return b"".join((pack(len(msg_id)), msg_id, _ONE, pack(len(header)), header, _ONE,
                         pack(len(part)), part))
    return b"".join([pack(len(msg_id)), msg_id, pack(len(headers)),
                     *chain.from_iterable(zip(map(pack, map(len, headers)), headers, strict=True)),
                     pack(len(parts)),
                     *chain.from_iterable(zip(map(pack, map(len, parts)), parts, strict=True))])


def encode_batch(batch_id: bytes, entries: list[bytes]) -> list[bytes]:
    """What a producer's DEALER sends."""
    return [batch_id, BATCH + b"%d" % len(entries), b"", b"".join(entries)]


def is_batch(frames: list[bytes]) -> bool:
    """A batch as the node's ROUTER receives it (after the routing id)?"""
    return len(frames) > 2 and frames[2].startswith(BATCH)


def decode_runs(frames: list[bytes], max_body_size: int) -> list[Member]:
    """``[routing id][batch id][BATCH:n][empty][entries]``: its members in runs, or why
    each refused one is (pzq.protocol.batch_runs). ProduceRefused (of the batch id)
    when the batch cannot be read at all."""
    routing_id, batch_id = frames[0], frames[1]
    count = whole_number(frames[2][len(BATCH):])
    if len(frames) != 5 or frames[3] != b"" or count is None \
            or not 1 <= count <= MAX_MESSAGES:
        raise ProduceRefused(f"a batch is batch id, BATCH:<1 to {MAX_MESSAGES}>, an empty "
                             "frame and one frame of entries", routing_id, batch_id)
    if len(batch_id) > MSG_ID_MAX:  # (its members' names are made of it: their ACK's)
        raise ProduceRefused(f"batch id of {len(batch_id)} bytes exceeds the limit of "
                             f"{MSG_ID_MAX} bytes", routing_id, batch_id)
    try:
        return read_runs(routing_id, batch_id, frames[4], count, max_body_size)
    except DecodeError:
        raise ProduceRefused(f"the batch's entries are not the {count} "
                             f"message{'' if count == 1 else 's'} its BATCH header says",
                             routing_id, batch_id) from None


def decode_batch(frames: list[bytes], max_body_size: int
                 ) -> list[tuple[Produce, bytes] | ProduceRefused]:
    """decode_runs with each message on its own: with its entry (the record's bytes
    after its fixed fields), or why it is refused."""
    routing_id, batch_id = frames[0], frames[1]
    found: list[tuple[Produce, bytes] | ProduceRefused] = []
    for member in decode_runs(frames, max_body_size):
        if isinstance(member, ProduceRefused):
            found.append(member)
            continue
        for index, (entry, size) in enumerate(zip(member.entries, member.body_sizes,
                                                  strict=True), member.first):
            found.append((Produce(routing_id, member_token(batch_id, index), member.headers,
                                  (), size), entry))
    return found


def encode_batch_ack(routing_id: bytes, batch_id: bytes,
                     results: Sequence[tuple[bool, bytes]]) -> list[bytes]:
    """``[routing id][batch id][status][BATCH:n][empty][results]`` for the ROUTER."""
    if results.count(_STORED) == len(results):  # all stored: one result repeated, in C
        body, every = _STORED_RESULT * len(results), True
    else:
        pack = RESULT.pack
        body = b"".join([pack(STATUS_OK if ok else STATUS_FAILED, len(text)) + text
                         for ok, text in results])
        every = all(ok for ok, _ in results)
    return [routing_id, batch_id, STATUS_OK if every else STATUS_FAILED,
            BATCH + b"%d" % len(results), b"", body]


def encode_stored_batch_ack(routing_id: bytes, batch_id: bytes, count: int) -> list[bytes]:
    """``encode_batch_ack`` of ``count`` messages all stored (a batch stored whole)."""
    return [routing_id, batch_id, STATUS_OK, BATCH + b"%d" % count, b"",
            _STORED_RESULT * count]


def answered(ack: list[bytes]) -> int:
    """How many messages a batch's ACK (from encode_batch_ack) answers."""
    return int(ack[3][len(BATCH):])


def is_batch_ack(frames: list[bytes]) -> bool:
    return len(frames) > 2 and frames[2].startswith(BATCH)


def decode_batch_ack(frames: list[bytes]) -> BatchAck:
    """``[batch id][status][BATCH:n][empty][results]`` as the producer's DEALER sees it."""
    count_text = frames[2][len(BATCH):]
    if len(frames) != 5 or frames[3] != b"" or not count_text.isdigit():
        raise DecodeError("a batch ACK is batch id, status, BATCH:n, empty, results")
    data, results, at = frames[4], [], 0
    count = int(count_text)
    if data == _STORED_RESULT * count:  # every one stored (the common answer), in C
        return BatchAck(frames[0], (_STORED,) * count)
    try:
        while at < len(data):
            status, length = RESULT.unpack_from(data, at)
            at += RESULT.size + length
            results.append((status == STATUS_OK, data[at - length:at]))
    except struct.error:
        raise DecodeError("a batch ACK's results are truncated") from None
    if at != len(data) or len(results) != count:
        raise DecodeError("a batch ACK's results do not match its count")
    return BatchAck(frames[0], tuple(results))


def speaks_batches(frames: Iterable[bytes]) -> bool:
    """Whether an ordinary ACK's header frames say the node speaks produce batches."""
    return PROTOCOL_HEADER in frames
