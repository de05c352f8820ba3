"""ZPER's protocols: identities, reader commands and status bytes, the writer's
response and ZPAck's acks, as pure functions.

A reader's identity names its topic: hash:1 mode:1 length:1 topic uuid:16, the hash
being ``0xff & (s[0]*31^(n-1) + ... + s[n-1])``. Requests are a command frame and
big-endian arguments; every reply starts with a one-byte status.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from pzq.errors import DecodeError

OK = 100
INVALID_OFFSET = 101
INVALID_COMMAND = 102
FORBIDDEN = 103  # pzq's own: the client's key may not read this topic (--authorization)
INTERNAL_ERROR = 255  # -1 as a signed byte, as ZPER writes it
LATEST = -1  # ZPER's own code: -1 latest, -2 earliest
EARLIEST = -2
INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")


def topic_hash(topic: bytes) -> int:
    value = 0
    for byte in topic:
        value = value * 31 + byte
    return value & 0xFF


def make_identity(topic: str, mode: int = 0) -> bytes:
    name = topic.encode()
    return bytes((topic_hash(name), mode, len(name))) + name + uuid.uuid4().bytes


def identity_topic(identity: bytes) -> str:
    if len(identity) < 3 or len(identity) != 3 + identity[2] + 16:
        raise DecodeError("identity is not hash, mode, length, topic, 16-byte uuid")
    name = identity[3:3 + identity[2]]
    if identity[0] != topic_hash(name):
        raise DecodeError("identity topic hash does not match its topic")
    return name.decode(errors="replace")


def encode_offset_request(timestamp_ms: int, max_entries: int | None = None) -> list[bytes]:
    frames = [b"OFFSET", INT64.pack(timestamp_ms)]
    if max_entries is not None:
        frames.append(INT32.pack(max_entries))
    return frames


def decode_offset_request(frames: list[bytes]) -> tuple[int, int | None]:
    """The time (or LATEST, EARLIEST) and the count asked for; None: as many as there are."""
    if len(frames) not in (2, 3) or len(frames[1]) != 8 or (len(frames) == 3
                                                             and len(frames[2]) != 4):
        raise DecodeError("OFFSET needs an 8-byte time and an optional 4-byte count")
    max_entries = INT32.unpack(frames[2])[0] if len(frames) == 3 else None
    return INT64.unpack(frames[1])[0], max_entries


def split_envelope(frames: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """A REQ socket puts an empty delimiter before the request; the reply must carry it
    back before the status, or the REQ socket drops the reply."""
    if len(frames) > 1 and frames[0] == b"":
        return frames[:1], frames[1:]
    return [], frames


def encode_fetch_request(offset: int, max_bytes: int) -> list[bytes]:
    return [b"FETCH", INT64.pack(offset), INT64.pack(max_bytes)]


def decode_fetch_request(frames: list[bytes]) -> tuple[int, int]:
    if len(frames) != 3 or len(frames[1]) != 8 or len(frames[2]) != 8:
        raise DecodeError("FETCH needs an 8-byte offset and an 8-byte size")
    return INT64.unpack(frames[1])[0], INT64.unpack(frames[2])[0]


# -- the writer, ack and relay ------------------------------------------------------------

NO_RESPONSE, RESPONSE_AT_FLUSH, RESPONSE_EVERY_WRITE = 0, 1, 2
WRITER_MODES = (NO_RESPONSE, RESPONSE_AT_FLUSH, RESPONSE_EVERY_WRITE)


@dataclass(frozen=True)
class WriterIdentity:
    topic: str
    mode: int


def parse_writer_identity(identity: bytes) -> WriterIdentity:
    """The topic and mode of a ZPER producer's identity; DecodeError saying what is
    wrong (its shape, its hash, its mode, its topic name)."""
    if len(identity) < 3 or len(identity) != 3 + identity[2] + 16:
        raise DecodeError(f"identity of {len(identity)} bytes is not hash:1 mode:1 length:1 "
                          "topic uuid:16")
    name = identity[3:3 + identity[2]]
    if identity[0] != topic_hash(name):
        raise DecodeError(f"identity hash 0x{identity[0]:02x} is not its topic's "
                          f"(0x{topic_hash(name):02x})")
    if identity[1] not in WRITER_MODES:
        raise DecodeError(f"identity mode {identity[1]} is not 0, 1 or 2")
    try:
        topic = name.decode("ascii")
    except UnicodeDecodeError:
        raise DecodeError("identity topic is not ASCII") from None
    return WriterIdentity(topic, identity[1])


def writer_response(identity: bytes, envelope: list[bytes], message_id: bytes) -> list[bytes]:
    """ZPER's writer answer: the producer's identity (for the ROUTER), its empty
    delimiter if it sent one (REQ), the first frame of the message written."""
    return [identity, *envelope, message_id]


def encode_ack(topic: str, message_id: bytes, offset: int) -> list[bytes]:
    """ZPAck: topic, message id (the message's first frame), 8-byte big-endian offset."""
    return [topic.encode(), message_id, INT64.pack(offset)]


def decode_ack(frames: list[bytes]) -> tuple[str, bytes, int]:
    if len(frames) != 3 or len(frames[2]) != 8:
        raise DecodeError("an ack is topic, message id and an 8-byte offset")
    return frames[0].decode(errors="replace"), frames[1], INT64.unpack(frames[2])[0]
