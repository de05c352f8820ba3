"""Encode and decode every frame layout pzq speaks, as pure functions.

The layouts are the original pzq's (see docs/protocol.rst). Anything before
the empty frame is protocol data; header frames are ``NAME:value``. Every decoder
checks frame counts and lengths before it unpacks and raises DecodeError, or
ProduceRefused for a producer message to answer with "0", with a reason a person
can act on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from pzq.errors import DecodeError, ProduceRefused

STATUS_OK = b"1"
STATUS_FAILED = b"0"
REPLICATION_FAILED = b"REPLICATION_FAILED"
DUPLICATE = b"DUPLICATE"  # stored already: a repeat of a DEDUP-ID within its window
QUEUE_FULL = b"QUEUE_FULL"
# made by the client, never sent by a node: a message given up without its ACK
NO_ACK = b"NO_ACK"
DELIVERY_HEADER = b"DELIVERY"

# Header names a producer may never send: cluster traffic and the device's own
# delivery bookkeeping. A producer frame carrying one is refused, never stored.
RESERVED_HEADERS = frozenset({b"REPLICA", b"ORIGIN", b"REMOVE", b"NODE", b"CLUSTER",
                              DELIVERY_HEADER})
# What a producer message may carry besides its body (--max-message-size): the id its
# ACK echoes, and its header frames together (a TAG's own limit: pzq.protocol.headers)
MSG_ID_MAX = 255  # bytes
HEADERS_MAX = 65_536  # bytes
HEADER_PATTERN = re.compile(rb"^([A-Za-z][A-Za-z0-9_.-]{0,63}):(.*)$", re.DOTALL)


class Produce(NamedTuple):
    """A producer message as the device's ROUTER received it (a tuple: one is made for
    each message sent alone, by decode_produce without a call of __new__)."""

    routing_id: bytes
    msg_id: bytes
    headers: tuple[bytes, ...]
    parts: tuple[bytes, ...]
    body_size: int


class ProducerAck(NamedTuple):
    """An ACK as the producer's DEALER receives it (a tuple: a batch's ACKs are made
    in C, with no Python call for each)."""

    #: the message's id, as the producer sent it (``send`` returns it)
    msg_id: bytes
    #: stored (``duplicate`` and ``replication_failed`` are ok too); False: not stored
    ok: bool
    #: empty, or ``DUPLICATE``, ``REPLICATION_FAILED``, ``MOVED ...``, ``NO_ACK`` or
    #: the node's reason of a refusal (``QUEUE_FULL``, ...), as bytes
    status_message: bytes

    @property
    def replication_failed(self) -> bool:
        """Stored on this node, but not copied to the replicas asked for in time
        (``ok`` all the same: see the cluster page)."""
        return self.ok and self.status_message == REPLICATION_FAILED

    @property
    def duplicate(self) -> bool:
        """A repeat of a message stored already (same DEDUP-ID, within the window)."""
        return self.ok and self.status_message == DUPLICATE

    @property
    def given_up(self) -> bool:
        """Made by the producer, not the node: no ACK came within its ``ack_timeout``
        (the node may have stored the message or not; send it again with the same
        DEDUP-ID to have it stored once)."""
        return not self.ok and self.status_message == NO_ACK


@dataclass(frozen=True, slots=True)
class Delivery:
    """A delivered message as the consumer's ROUTER received it."""

    peer: bytes
    key: bytes
    sent_us: int
    ack_timeout_us: int
    headers: dict[str, str]
    parts: tuple[bytes, ...]

    @property
    def deliveries(self) -> int | None:
        """How often this message was delivered, None when the node does not say
        (its default, the original's layout, carries no delivery count)."""
        return delivery_count(self.headers)


# -- produce ---------------------------------------------------------------

def decode_produce(frames: list[bytes], max_body_size: int) -> Produce:
    """``[routing id][msg id][header…][empty][part 1..N]`` as seen by the ROUTER."""
    if len(frames) == 4 and not frames[2]:  # (no header, one part: most messages)
        body = frames[3]
        if len(body) <= max_body_size and len(frames[1]) <= MSG_ID_MAX:
            return _NEW_TUPLE(Produce, (frames[0], frames[1], (), (body,), len(body)))
    if not frames:
        raise DecodeError("empty message")
    routing_id = frames[0]
    if len(frames) < 2:
        raise ProduceRefused("missing message id frame", routing_id, b"")
    msg_id = frames[1]
    try:
        delimiter = frames.index(b"", 2)
    except ValueError:
        raise ProduceRefused("missing empty delimiter frame before the body",
                               routing_id, msg_id) from None
    parts = tuple(frames[delimiter + 1:])
    if not parts:
        raise ProduceRefused("message has no body part after the empty frame",
                               routing_id, msg_id)
    body_size = sum(map(len, parts))
    headers = tuple(frames[2:delimiter])
    headers_size = 0
    for header in headers:
        headers_size += len(header)
        check_producer_header(header, routing_id, msg_id)
    if body_size > max_body_size or len(msg_id) > MSG_ID_MAX \
            or headers_size > HEADERS_MAX:  # (one look at all three)
        raise ProduceRefused(too_big(body_size, max_body_size, msg_id, headers),
                             routing_id, msg_id)
    return _NEW_TUPLE(Produce, (routing_id, msg_id, headers, parts, body_size))


_NEW_TUPLE = tuple.__new__


def too_big(body_size: int, max_body_size: int, msg_id: bytes,
            headers: tuple[bytes, ...]) -> str:
    """Why a message over one of its limits is refused (the body's named first)."""
    if body_size > max_body_size:
        return f"message body of {body_size} bytes exceeds the limit of {max_body_size} bytes"
    if len(msg_id) > MSG_ID_MAX:
        return msg_id_refusal(len(msg_id))
    return headers_refusal(sum(map(len, headers)))


def msg_id_refusal(size: int) -> str:
    return f"message id of {size} bytes exceeds the limit of {MSG_ID_MAX} bytes"


def headers_refusal(size: int) -> str:
    return f"header frames of {size} bytes exceed the limit of {HEADERS_MAX} bytes together"


def check_producer_headers(headers: tuple[bytes, ...], routing_id: bytes,
                           msg_id: bytes) -> None:
    """ProduceRefused for header frames too big together, or one that is no header a
    producer may send."""
    size = sum(map(len, headers))
    if size > HEADERS_MAX:
        raise ProduceRefused(headers_refusal(size), routing_id, msg_id)
    for header in headers:
        check_producer_header(header, routing_id, msg_id)


def check_producer_header(header: bytes, routing_id: bytes, msg_id: bytes) -> None:
    match = HEADER_PATTERN.match(header)
    if match is None:
        raise ProduceRefused(f"header frame {header[:40].decode(errors='replace')} is not "
                             "NAME:value",
                               routing_id, msg_id)
    if match.group(1).upper() in RESERVED_HEADERS:
        raise ProduceRefused(
            f"header {match.group(1).decode()} is reserved for the device and its cluster",
            routing_id, msg_id)


def encode_produce(msg_id: bytes, parts: list[bytes] | tuple[bytes, ...],
                   headers: tuple[bytes, ...] = ()) -> list[bytes]:
    """What a producer's DEALER sends."""
    return [msg_id, *headers, b"", *parts]


# -- producer ACK ----------------------------------------------------------

def encode_producer_ack(routing_id: bytes, msg_id: bytes, ok: bool,
                        status_message: bytes = b"") -> list[bytes]:
    """``[routing id][msg id][status][empty][status message?]`` for the ROUTER."""
    frames = [routing_id, msg_id, STATUS_OK if ok else STATUS_FAILED, b""]
    if status_message:
        frames.append(status_message)
    return frames


def decode_producer_ack(frames: list[bytes]) -> ProducerAck:
    """``[msg id][status][header…][empty][status message?]`` as the DEALER sees it."""
    if len(frames) < 3:
        raise DecodeError(f"producer ACK has {len(frames)} frames, expected at least 3")
    try:
        delimiter = frames.index(b"", 2)
    except ValueError:
        raise DecodeError("producer ACK has no empty delimiter frame") from None
    status = frames[1]
    if status not in (STATUS_OK, STATUS_FAILED):
        raise DecodeError(f"producer ACK status {status[:8]!r} is not '1' or '0'")
    message = frames[delimiter + 1] if len(frames) > delimiter + 1 else b""
    return ProducerAck(frames[0], status == STATUS_OK, message)


# -- delivery to consumers -------------------------------------------------

def encode_delivery(key: bytes, sent_us: int, ack_timeout_us: int,
                    parts: tuple[bytes, ...], headers: tuple[bytes, ...] = ()) -> list[bytes]:
    """``[key][sent µs][ack timeout µs][header…][empty][part…]`` from the DEALER.

    With no headers this is byte for byte the original pzq's layout, whose own
    consumers take the body from the fifth frame on; header frames (the delivery
    count and the producer's headers) are sent only when the operator opts in.
    """
    return [key, b"%d" % sent_us, b"%d" % ack_timeout_us, *headers, b"", *parts]


def delivery_headers(deliveries: int, producer_headers: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The header frames of a delivery under --delivery-headers."""
    return (b"DELIVERY:%d" % deliveries, *producer_headers)


def decode_delivery(frames: list[bytes]) -> Delivery:
    """What a consumer's ROUTER receives: the device's peer id comes first.

    Reads both layouts: the original's (the empty frame at index 4) and the one
    with header frames between the ack timeout and the empty frame.
    """
    if len(frames) < 6:
        raise DecodeError(f"delivery has {len(frames)} frames, expected at least 6")
    try:
        delimiter = frames.index(b"", 4)
    except ValueError:
        raise DecodeError("delivery has no empty delimiter frame") from None
    peer, key, sent, timeout = frames[:4]
    try:
        sent_us, ack_timeout_us = int(sent), int(timeout)
    except ValueError:
        raise DecodeError("delivery sent time or ack timeout is not decimal") from None
    return Delivery(peer, key, sent_us, ack_timeout_us,
                    parse_headers(frames[4:delimiter]), tuple(frames[delimiter + 1:]))


def delivery_count(headers: dict[str, str]) -> int | None:
    value = headers.get(DELIVERY_HEADER.decode())
    return int(value) if value is not None and value.isdigit() else None


def parse_headers(frames: list[bytes]) -> dict[str, str]:
    """Header frames as a dict; frames that are not NAME:value are ignored, as the
    protocol asks clients to ignore what they do not know."""
    headers: dict[str, str] = {}
    for frame in frames:
        match = HEADER_PATTERN.match(frame)
        if match is not None:
            headers[match.group(1).decode()] = match.group(2).decode(errors="replace")
    return headers


# -- consumer ACK ----------------------------------------------------------

def encode_consumer_ack(peer: bytes, key: bytes, ok: bool) -> list[bytes]:
    """``[peer id][key][status]`` as the consumer's ROUTER sends it."""
    return [peer, key, STATUS_OK if ok else STATUS_FAILED]


def decode_consumer_ack(frames: list[bytes]) -> tuple[bytes, bool]:
    """``[key][status]`` as the device's DEALER receives it; "1" removes, else give back."""
    if len(frames) != 2:
        raise DecodeError(f"consumer ACK has {len(frames)} frames, expected 2 (key, status)")
    key, status = frames
    if not key:
        raise DecodeError("consumer ACK has an empty key")
    if not status:
        raise DecodeError("consumer ACK has an empty status")
    return key, status == STATUS_OK


# -- monitor ---------------------------------------------------------------

# A monitor request is a verb and a few words (the longest: BACKUP's path, at most
# PATH_MAX, 4 KiB): a command frame longer than this is refused unread
MONITOR_REQUEST_MAX = 64 * 1024  # bytes


def monitor_request_refusal(command: bytes) -> str | None:
    """Why a monitor command is refused for its length (None: it is not too long)."""
    if len(command) <= MONITOR_REQUEST_MAX:
        return None
    return (f"monitor request of {len(command)} bytes exceeds the limit of "
            f"{MONITOR_REQUEST_MAX} bytes")


def decode_monitor_request(frames: list[bytes]) -> tuple[list[bytes], bytes, list[bytes]]:
    """The last frame is the command, ``VERB [argument…]``; what comes before (less
    empty frames at the end) is the envelope the reply goes back along. Works for
    REQ and DEALER. Returns (envelope, verb in upper case, arguments)."""
    if len(frames) < 2:
        raise DecodeError("monitor request has no command frame")
    verb, *arguments = frames[-1].split() or [b""]
    return monitor_envelope(frames), verb.upper(), arguments


def monitor_envelope(frames: list[bytes]) -> list[bytes]:
    """What a monitor request's reply goes back along: the frames before its command,
    less empty frames at the end (the routing id alone, of a request of one frame)."""
    envelope = frames[:-1] or frames[:1]
    while len(envelope) > 1 and envelope[-1] == b"":
        envelope.pop()
    return envelope


def encode_monitor_reply(envelope: list[bytes], text: bytes) -> list[bytes]:
    return [*envelope, b"", text]
