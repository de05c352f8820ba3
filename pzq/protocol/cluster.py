"""Frame layouts of the traffic between cluster nodes, as pure functions.

Each node binds a ROUTER at its --broadcast-dsn and connects one DEALER to each
peer. Requests go out on the DEALER; the peer's ROUTER answers on the same pipe.

    PING       node id, endpoint        -> PONG node id, more, tombstones, held
    REPLICATE  origin, batch id, holders, (seq, record)*  -> REPLICATED batch id
    SCHEDULE   origin, batch id, holders, (seq due, record)*  -> REPLICATED batch id
    REMOVE     origin, remove id, seqs  -> REMOVED remove id (once written)
    APPLIED    seqs                     (no answer: tombstones applied)
    TOPICS     origin, JSON             (no answer: who reads its topics)
    DONE       origin, done id, group, seqs  -> NOTED done id (once written)
    ROUTING    origin, JSON             (no answer: its client endpoints, partitions)
    LEAVING    origin                   (no answer: it is stopping, by SIGTERM or SIGINT)
    RESTORED   origin, (first end)*     -> RESTORED_KEPT (first end)* (once written;
                                           none from a node before protocol 6)

``seqs``, ``tombstones`` and ``held`` are packed 8-byte big-endian sequence
numbers. In a PONG, ``tombstones`` are the asker's messages acked on the answering
node while the asker was down, and ``held`` those of the asker's messages the
answering node still has out with its consumers (or acked without the asker having
confirmed the remove): the asker does not deliver them meanwhile.

TOPICS says who reads the origin's topics (``pzq.protocol.topic_reads``): what the
group ``default`` reads, and the named groups of each topic, so that a survivor's
takeover serves each group only what it holds. A node that does not know TOPICS
refuses it as an unknown command and nothing else changes.

DONE says that the named consumer group (``default`` included) is done with the
origin's messages ``seqs`` (acked or given up) while other groups may still hold
them: the origin marks them done for that group, a holder marks its copies (and
drops a copy every holding group is done with). It is kept and sent again until
NOTED, as REMOVE is until REMOVED.

SCHEDULE copies scheduled messages (DELAY:, NOT-BEFORE:) as REPLICATE copies the
others, each with its due time (``seq due``: two 8-byte big-endian numbers, the due
time in µs since the epoch as the origin fixed it): the holders keep them until the
origin releases them (a new message, copied as any, and a REMOVE of the scheduled
one), and a node that took the origin over releases them at that time. A node of
protocol 2 refuses it as an unknown command: the producer's ACK says
REPLICATION_FAILED, as it did before.

ROUTING says where clients reach the origin, which topics it knows as partitioned
and the cluster protocol it speaks (``pzq.protocol.routing``), with every heartbeat;
a node that does not know it refuses it as it refuses TOPICS.

LEAVING is the last frame of a node stopping by SIGTERM or SIGINT, after its last
copies and ACKs: its peers count it down at once (pzq.cluster.peers). It goes only to
peers of protocol 4 or later: an earlier one would refuse it and count it in
``cluster_rejected``.

RESTORED says which of its sequence numbers the origin gave out once and no longer
holds, having been restored from a backup (``first end``: two 8-byte big-endian
numbers, a range with its end left out): the holders of its copies among them
deliver those as in a takeover while the origin is up (pzq.cluster.takeover). A
restored node sends it with every heartbeat, to peers of protocol 5 or later only,
until the peer answers RESTORED_KEPT with the same ranges: a peer of protocol 6 or
later keeps them in its store (beside its copies, read back at its start) while it
holds a copy in them, and confirms once that is written; one that holds none confirms
at once, keeping nothing. It answers only a sender of protocol 6 or later (an earlier
one would refuse the answer): a peer of protocol 5 never confirms and is told with
every heartbeat, as before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pzq.errors import DecodeError
from pzq.protocol.message_keys import SEQ, is_node_id
from pzq.protocol.routing import Routing, decode_routing
from pzq.protocol.topic_reads import (
    DEFAULT_GROUP,
    DefaultReads,
    GroupReads,
    decode_default_reads,
)

__all__ = ["DEFAULT_GROUP", "DefaultReads", "GroupReads", "decode_default_reads"]

PING, PONG = b"PING", b"PONG"
REPLICATE, REPLICATED = b"REPLICATE", b"REPLICATED"
SCHEDULE = b"SCHEDULE"
SEQ_DUE = struct.Struct(">QQ")  # a scheduled copy's seq and due µs
REMOVE, REMOVED, APPLIED = b"REMOVE", b"REMOVED", b"APPLIED"
TOPICS = b"TOPICS"
DONE, NOTED = b"DONE", b"NOTED"
ROUTING = b"ROUTING"
LEAVING = b"LEAVING"
RESTORED, RESTORED_KEPT = b"RESTORED", b"RESTORED_KEPT"
SEQ_RANGE = struct.Struct(">QQ")  # first seq, end seq (left out)
BATCH_ID = struct.Struct(">Q")  # also the remove id


def pack_seqs(seqs: list[int]) -> bytes:
    return struct.pack(f">{len(seqs)}Q", *seqs)


def unpack_seqs(blob: bytes) -> list[int]:
    if len(blob) % 8:
        raise DecodeError("sequence list length is not a multiple of 8")
    return list(struct.unpack(f">{len(blob) // 8}Q", blob))


def _node_id(frame: bytes) -> bytes:
    if not is_node_id(frame):
        raise DecodeError(f"{frame[:20]!r} is not a node id")
    return frame


@dataclass(frozen=True)
class Replicate:
    origin: bytes
    batch_id: int
    holders: bytes  # encoded holder list, kept as sent
    messages: list[tuple[int, bytes]]  # (seq, record)


def encode_leaving(node_id: bytes) -> list[bytes]:
    return [LEAVING, node_id]


def decode_leaving(frames: list[bytes]) -> bytes:
    if len(frames) != 2:
        raise DecodeError("LEAVING needs the origin")
    return _node_id(frames[1])


def encode_ping(node_id: bytes, endpoint: str) -> list[bytes]:
    return [PING, node_id, endpoint.encode()]


def decode_ping(frames: list[bytes]) -> tuple[bytes, str]:
    if len(frames) != 3:
        raise DecodeError("PING needs node id and endpoint")
    return _node_id(frames[1]), frames[2].decode(errors="replace")


@dataclass(frozen=True)
class Pong:
    node_id: bytes
    tombstones: list[int]
    more: bool  # more tombstones follow in the next PONG
    held: list[int]


def encode_pong(node_id: bytes, tombstones: list[int], more: bool,
                held: list[int]) -> list[bytes]:
    return [PONG, node_id, b"1" if more else b"0", pack_seqs(tombstones), pack_seqs(held)]


def decode_pong(frames: list[bytes]) -> Pong:
    if len(frames) != 5 or frames[2] not in (b"0", b"1"):
        raise DecodeError("PONG needs node id, more flag, tombstones and held messages")
    return Pong(_node_id(frames[1]), unpack_seqs(frames[3]), frames[2] == b"1",
                unpack_seqs(frames[4]))


def encode_replicate(origin: bytes, batch_id: int, holders: bytes,
                     messages: list[tuple[int, bytes]]) -> list[bytes]:
    frames = [REPLICATE, origin, BATCH_ID.pack(batch_id), holders]
    for seq, value in messages:
        frames.append(SEQ.pack(seq))
        frames.append(value)
    return frames


def decode_replicate(frames: list[bytes]) -> Replicate:
    if len(frames) < 6 or len(frames) % 2:
        raise DecodeError("REPLICATE needs origin, batch id, holders and (seq, record) pairs")
    if len(frames[2]) != BATCH_ID.size:
        raise DecodeError("REPLICATE batch id is not 8 bytes")
    messages = []
    for index in range(4, len(frames), 2):
        if len(frames[index]) != SEQ.size:
            raise DecodeError("REPLICATE sequence number is not 8 bytes")
        messages.append((SEQ.unpack(frames[index])[0], frames[index + 1]))
    return Replicate(_node_id(frames[1]), BATCH_ID.unpack(frames[2])[0], frames[3], messages)


@dataclass(frozen=True)
class Schedule:
    origin: bytes
    batch_id: int
    holders: bytes  # encoded holder list, kept as sent
    messages: list[tuple[int, int, bytes]]  # (seq, due µs, record)


def encode_schedule(origin: bytes, batch_id: int, holders: bytes,
                    messages: list[tuple[int, int, bytes]]) -> list[bytes]:
    frames = [SCHEDULE, origin, BATCH_ID.pack(batch_id), holders]
    for seq, due_us, value in messages:
        frames.append(SEQ_DUE.pack(seq, due_us))
        frames.append(value)
    return frames


def decode_schedule(frames: list[bytes]) -> Schedule:
    if len(frames) < 6 or len(frames) % 2:
        raise DecodeError("SCHEDULE needs origin, batch id, holders and (seq due, record) "
                          "pairs")
    if len(frames[2]) != BATCH_ID.size:
        raise DecodeError("SCHEDULE batch id is not 8 bytes")
    messages = []
    for index in range(4, len(frames), 2):
        if len(frames[index]) != SEQ_DUE.size:
            raise DecodeError("SCHEDULE seq and due time are not 16 bytes")
        seq, due_us = SEQ_DUE.unpack(frames[index])
        messages.append((seq, due_us, frames[index + 1]))
    return Schedule(_node_id(frames[1]), BATCH_ID.unpack(frames[2])[0], frames[3], messages)


def encode_replicated(batch_id: int) -> list[bytes]:
    return [REPLICATED, BATCH_ID.pack(batch_id)]


def decode_replicated(frames: list[bytes]) -> int:
    if len(frames) != 2 or len(frames[1]) != BATCH_ID.size:
        raise DecodeError("REPLICATED needs an 8-byte batch id")
    batch_id: int = BATCH_ID.unpack(frames[1])[0]
    return batch_id


def encode_remove(origin: bytes, remove_id: int, seqs: list[int]) -> list[bytes]:
    return [REMOVE, origin, BATCH_ID.pack(remove_id), pack_seqs(seqs)]


def decode_remove(frames: list[bytes]) -> tuple[bytes, int, list[int]]:
    if len(frames) != 4 or len(frames[2]) != BATCH_ID.size:
        raise DecodeError("REMOVE needs origin, an 8-byte remove id and sequence numbers")
    return _node_id(frames[1]), BATCH_ID.unpack(frames[2])[0], unpack_seqs(frames[3])


def encode_removed(remove_id: int) -> list[bytes]:
    return [REMOVED, BATCH_ID.pack(remove_id)]


def decode_removed(frames: list[bytes]) -> int:
    if len(frames) != 2 or len(frames[1]) != BATCH_ID.size:
        raise DecodeError("REMOVED needs an 8-byte remove id")
    batch_id: int = BATCH_ID.unpack(frames[1])[0]
    return batch_id


def encode_applied(seqs: list[int]) -> list[bytes]:
    return [APPLIED, pack_seqs(seqs)]


def decode_applied(frames: list[bytes]) -> list[int]:
    if len(frames) != 2:
        raise DecodeError("APPLIED needs sequence numbers")
    return unpack_seqs(frames[1])


def encode_topics(origin: bytes, reads: DefaultReads) -> list[bytes]:
    return [TOPICS, origin, reads.encode()]


def decode_topics(frames: list[bytes]) -> tuple[bytes, DefaultReads]:
    if len(frames) != 3:
        raise DecodeError("TOPICS needs origin and a JSON object")
    return _node_id(frames[1]), decode_default_reads(frames[2])


def encode_done(origin: bytes, done_id: int, group: str, seqs: list[int]) -> list[bytes]:
    return [DONE, origin, BATCH_ID.pack(done_id), group.encode(), pack_seqs(seqs)]


def decode_done(frames: list[bytes]) -> tuple[bytes, int, str, list[int]]:
    if len(frames) != 5 or len(frames[2]) != BATCH_ID.size or not frames[3]:
        raise DecodeError("DONE needs origin, an 8-byte done id, a group and sequence numbers")
    try:
        group = frames[3].decode()
    except UnicodeDecodeError:
        raise DecodeError("DONE group name is not UTF-8") from None
    return _node_id(frames[1]), BATCH_ID.unpack(frames[2])[0], group, unpack_seqs(frames[4])


def encode_noted(done_id: int) -> list[bytes]:
    return [NOTED, BATCH_ID.pack(done_id)]


def decode_noted(frames: list[bytes]) -> int:
    if len(frames) != 2 or len(frames[1]) != BATCH_ID.size:
        raise DecodeError("NOTED needs an 8-byte done id")
    done_id: int = BATCH_ID.unpack(frames[1])[0]
    return done_id


def encode_routing(origin: bytes, routing: Routing) -> list[bytes]:
    return [ROUTING, origin, routing.encode()]


def decode_routing_frame(frames: list[bytes]) -> tuple[bytes, Routing]:
    if len(frames) != 3:
        raise DecodeError("ROUTING needs origin and a JSON object")
    return _node_id(frames[1]), decode_routing(frames[2])


def encode_restored(origin: bytes, ranges: list[tuple[int, int]]) -> list[bytes]:
    return [RESTORED, origin, pack_ranges(ranges)]


def pack_ranges(ranges: list[tuple[int, int]]) -> bytes:
    return b"".join(SEQ_RANGE.pack(first, end) for first, end in ranges)


def unpack_ranges(blob: bytes, what: str) -> list[tuple[int, int]]:
    if len(blob) % SEQ_RANGE.size:
        raise DecodeError(f"{what} needs 16-byte seq ranges")
    ranges = [(first, end) for first, end in SEQ_RANGE.iter_unpack(blob)]
    if any(first >= end for first, end in ranges):
        raise DecodeError(f"{what} range ends before it begins")
    return ranges


def decode_restored(frames: list[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    if len(frames) != 3 or len(frames[2]) % SEQ_RANGE.size:
        raise DecodeError("RESTORED needs origin and 16-byte seq ranges")
    return _node_id(frames[1]), unpack_ranges(frames[2], "RESTORED")


def encode_restored_kept(ranges: list[tuple[int, int]]) -> list[bytes]:
    return [RESTORED_KEPT, pack_ranges(ranges)]


def decode_restored_kept(frames: list[bytes]) -> list[tuple[int, int]]:
    if len(frames) != 2:
        raise DecodeError("RESTORED_KEPT needs its seq ranges")
    return unpack_ranges(frames[1], "RESTORED_KEPT")
