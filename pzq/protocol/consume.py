"""The consume endpoint's frames (--consume-dsn), as pure functions (docs/groups.rst,
"The consume endpoint"). Every message starts with a verb frame, in both directions.

Consumer (DEALER) to node::

    CONSUME | topic | group | window | option...     option: FILTER:tag, FILTER:prefix*,
                                                      START:earliest|latest|<µs since epoch>,
                                                      ACK:key (repeatable: ACKs a node that
                                                      did not know the connection refused),
                                                      CONFIRM:1 (answer ACKs once written),
                                                      DECLARE:1 (make the topic if missing),
                                                      PROTOCOL:2 (batches, below)
    ACK | key | key...        done with these deliveries (protocol 2: a frame may hold
                              several keys, each after one space)
    NACK | key | key...       give them back, to be delivered again
    NACK | DELAY:ms | key...  give them back, to go again after ms milliseconds
    WORKING | key | key...    still at work on them: each deadline starts again
    REJECT | key | key...     give them up now: to the dead letters, never again
    HEARTBEAT                 accepted, not needed: a consumer is alive while its
                              connection is (ZeroMQ's heartbeats)
    BYE                       going away: give back what is unacked, at once

Node to consumer::

    CONSUMING | topic | group | window | heartbeat ms (| PROTOCOL:2, answering PROTOCOL:2)
    DELIVER | topic | group | key | sent µs | ack timeout µs | (empty) | part 1 | ... | part N
        (with --delivery-headers: DELIVERY:n and the producer's headers before the empty frame)
    BATCH | topic | group | sent µs | ack timeout µs | entries      (protocol 2 only)
        entries, one frame, for each delivery: key length:1 key header count:4
        (length:4 header)* part count:4 (length:4 part)*, lengths big-endian; headers
        as DELIVER's (with --delivery-headers only)
    HEARTBEAT                 seldom: to find a consumer whose connection went
    ERROR | what was wrong
    REFUSED | ACK | key...    after the ERROR of an ACK on a connection the node does not
                              know (it restarted): the keys, to send again with CONSUME
    ACKED | key | key...      with CONFIRM:1, the ACKs that took effect (written), after
                              the batch that wrote them
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat

from pzq.errors import DecodeError
from pzq.protocol.frame_groups import group_chunks, read_group
from pzq.protocol.frames import parse_headers
from pzq.protocol.message_keys import (
    MESSAGE_KEY_LENGTH,
    MESSAGE_KEY_PATTERN,
    KeyNumbers,
    joined_key_numbers,
    message_key,
)
from pzq.protocol.numbers import is_whole_number, whole_number
from pzq.protocol.time_headers import epoch_us, iso_moment

CONSUME = b"CONSUME"
ACK = b"ACK"
NACK = b"NACK"
HEARTBEAT = b"HEARTBEAT"
BYE = b"BYE"
CONSUMING = b"CONSUMING"
DELIVER = b"DELIVER"
ERROR = b"ERROR"
REFUSED = b"REFUSED"
ACKED = b"ACKED"
WORKING = b"WORKING"
REJECT = b"REJECT"
BATCH = b"BATCH"
PROTOCOL = b"PROTOCOL:"
# 1: one DELIVER per message and one key per frame; 2: BATCH, several keys a frame.
# A consumer asks with CONSUME's PROTOCOL option and the node's CONSUMING says which
# it speaks; one that does not ask gets protocol 1.
LATEST_PROTOCOL = 2
KEY_SEPARATOR = b" "
NO_HEADER_GROUP = b"".join(group_chunks(()))  # a delivery's headers when none go
DELAY = b"DELAY:"
MAX_DELAY_MS = 7 * 24 * 3600 * 1000  # a NACK's delay: a week at most
US_PER_MS = 1000
MAX_WINDOW = 100_000
MAX_KEYS = 10_000  # keys in one ACK or NACK
START_WORDS = ("earliest", "latest")


@dataclass(frozen=True, slots=True)
class Subscribe:
    topic: str
    group: str
    window: int
    filter: str = ""  # "": every tag; "x*": tags starting with x; else that tag
    start: str | int = "earliest"  # or "latest", or µs since the epoch
    acked: tuple[bytes, ...] = ()  # ACKs the node refused before this CONSUME (ACK:key)
    confirm: bool = False  # CONFIRM:1: ACKED answers each ACK once it is written
    declare: bool = False  # DECLARE:1: make the topic (and group) when missing
    protocol: int = 1  # PROTOCOL:n: the highest the consumer speaks


@dataclass(frozen=True, slots=True)
class Request:
    verb: bytes
    subscribe: Subscribe | None = None  # CONSUME
    keys: tuple[bytes, ...] = ()  # ACK, NACK, WORKING, REJECT
    delay_ms: int = 0  # NACK with DELAY:ms

    @property
    def delay_us(self) -> int:
        return self.delay_ms * US_PER_MS


@dataclass(frozen=True, slots=True)
class NodeMessage:
    """What a consumer's DEALER receives."""

    verb: bytes
    topic: str = ""
    group: str = ""
    key: bytes = b""
    sent_us: int = 0
    ack_timeout_us: int = 0
    headers: dict[str, str] | None = None
    parts: tuple[bytes, ...] = ()
    window: int = 0
    heartbeat_ms: int = 0
    error: str = ""
    keys: tuple[bytes, ...] = ()  # REFUSED, ACKED
    protocol: int = 1  # CONSUMING
    # BATCH: each delivery's key, headers and parts
    entries: tuple[tuple[bytes, tuple[bytes, ...], tuple[bytes, ...]], ...] = ()


# -- consumer to node ----------------------------------------------------------

def decode_request(frames: list[bytes]) -> Request:
    """A request after the ROUTER's routing id; DecodeError says what is wrong."""
    if not frames:
        raise DecodeError(f"empty request; {VERBS_TEXT}")
    verb, rest = frames[0], frames[1:]
    decode = REQUEST_DECODERS.get(verb)
    if decode is None:
        shown = verb[:40].decode(errors="replace")
        raise DecodeError(f"unknown request {shown!r}; {VERBS_TEXT}")
    return decode(verb, rest)


def _subscribe_request(verb: bytes, rest: list[bytes]) -> Request:
    return Request(verb, subscribe=_decode_subscribe(rest))


def _keys_request(verb: bytes, rest: list[bytes]) -> Request:
    return Request(verb, keys=_decode_keys(verb, rest))


def _nack_request(verb: bytes, rest: list[bytes]) -> Request:
    if rest and rest[0].startswith(DELAY):
        return Request(verb, keys=_decode_keys(verb, rest[1:]), delay_ms=_delay_ms(rest[0]))
    return _keys_request(verb, rest)


def _bare_request(verb: bytes, rest: list[bytes]) -> Request:
    if rest:
        raise DecodeError(f"{verb.decode()} takes no frames after it, got {len(rest)}")
    return Request(verb)


# Every verb a consumer sends, with what reads the frames after it: a new verb is its
# entry here, its handler (pzq.serving.consume_endpoint) and its client's method.
REQUEST_DECODERS: dict[bytes, Callable[[bytes, list[bytes]], Request]] = {
    CONSUME: _subscribe_request, ACK: _keys_request, NACK: _nack_request,
    WORKING: _keys_request, REJECT: _keys_request, HEARTBEAT: _bare_request,
    BYE: _bare_request}
REQUESTS = tuple(REQUEST_DECODERS)
VERBS_TEXT = ("send " + ", ".join(verb.decode() for verb in REQUESTS[:-1])
              + f" or {REQUESTS[-1].decode()}")


def _delay_ms(frame: bytes) -> int:
    delay = whole_number(frame[len(DELAY):])
    if delay is None or delay > MAX_DELAY_MS:
        raise DecodeError(f"NACK {frame[:40]!r} is not DELAY:<milliseconds, at most "
                          f"{MAX_DELAY_MS}>")
    return delay


def _decode_subscribe(frames: list[bytes]) -> Subscribe:
    if len(frames) < 3:
        raise DecodeError(f"CONSUME needs topic, group and window frames, got {len(frames)}")
    topic, group, window_text = (frame.decode(errors="replace") for frame in frames[:3])
    window = whole_number(frames[2])
    if window is None or not 1 <= window <= MAX_WINDOW:
        raise DecodeError(f"CONSUME window {window_text[:20]!r} is not a number from 1 to "
                          f"{MAX_WINDOW}")
    options: dict[str, str | int | bool] = {}
    acked: list[bytes] = []
    for frame in frames[3:]:
        if frame[:4].upper() == b"ACK:":
            if len(acked) == MAX_KEYS:  # not "is not ... ACK:key", which it is
                raise DecodeError(f"CONSUME has more than {MAX_KEYS} ACK:key options")
            if MESSAGE_KEY_PATTERN.fullmatch(frame, 4) is None:  # not passed by, unanswered
                raise DecodeError(f"CONSUME option {frame[:40]!r}: "
                                  f"{frame[4:44].decode(errors='replace')} is not a pzq "
                                  "message key")
            acked.append(frame[4:])
            continue
        name, sep, value = frame.decode(errors="replace").partition(":")
        name = name.upper()
        if name in ("CONFIRM", "DECLARE") and value in ("0", "1"):
            options[name.lower()] = value == "1"
        elif name == "PROTOCOL" and is_whole_number(value) and value.strip("0"):
            # a number above the node's own gets the node's own, however long
            asked = whole_number(value)
            options["protocol"] = LATEST_PROTOCOL if asked is None else min(asked,
                                                                            LATEST_PROTOCOL)
        elif sep and name in ("FILTER", "START"):
            options[name.lower()] = decode_start(value) if name == "START" else value
        else:
            raise DecodeError(f"CONSUME option {frame[:40]!r} is not FILTER:value, "
                              "START:earliest|latest|<µs since the epoch>, ACK:key, "
                              "PROTOCOL:<number>, CONFIRM:0|1 or DECLARE:0|1")
    return Subscribe(topic, group, window, acked=tuple(acked),
                     **options)  # type: ignore[arg-type]


def start_of(start: str | int | datetime) -> str | int:
    """A group consumer's ``start`` as CONSUME sends it: earliest, latest, or µs since
    the epoch of a number, an aware datetime or an ISO 8601 text (no zone: UTC), as ``pzq-ctl``
    and ``pzq-consume`` read ``--start`` (a JetStream user's start time is a datetime).
    ValueError, before anything is sent, for anything else: the node would refuse it."""
    if isinstance(start, str):
        try:
            return decode_start(start)
        except DecodeError:
            pass
        try:
            return epoch_us(iso_moment(start), "start")
        except ValueError:
            pass
    elif isinstance(start, int | datetime) and not isinstance(start, bool):
        return epoch_us(start, "start")
    raise ValueError("start must be earliest, latest or a time (a datetime, ISO 8601 such "
                     f"as 2026-12-01T09:00:00Z, or µs since the epoch), got {start!r}")


def decode_start(value: str) -> str | int:
    if value in START_WORDS:
        return value
    since = whole_number(value)
    if since is not None:
        return since
    raise DecodeError(f"START:{value[:40]} is not earliest, latest or µs since the epoch")


def ack_keys(frames: list[bytes]) -> list[bytes] | None:
    """The keys of a well-formed ACK (the common request, read without building a
    Request); None for anything else, which decode_request reads and judges."""
    if len(frames) > 1 and frames[0] == ACK and len(frames) <= MAX_KEYS + 1:
        keys = split_keys(frames[1:])
        if len(keys) <= MAX_KEYS:
            return keys
    return None


def ack_key_numbers(frames: list[bytes], at_least: int) -> KeyNumbers | None:
    """``ack_keys`` read into numbers (``joined_key_numbers``) where the ACK's keys, at
    least ``at_least`` of them, are all in one frame, joined by KEY_SEPARATOR (what
    ``ack_many`` sends): the frame is read as it came, no bytes object made a key. None
    for anything else (``ack_keys`` then reads it, and judges any bad key)."""
    if len(frames) != 2 or frames[0] != ACK:
        return None
    joined = frames[1]
    # as many keys as a frame of that length holds, if it holds keys alone (the
    # read checks it does: no count of the separators, a pass over the bytes)
    count = (len(joined) + 1) // (MESSAGE_KEY_LENGTH + 1)
    if count < at_least or count > MAX_KEYS:
        return None
    return joined_key_numbers(joined, count)


def split_keys(frames: list[bytes]) -> list[bytes]:
    """The keys of key frames, each holding one key or (protocol 2) several."""
    if len(frames) == 1:
        return frames[0].split(KEY_SEPARATOR)
    return KEY_SEPARATOR.join(frames).split(KEY_SEPARATOR)


def _decode_keys(verb: bytes, frames: list[bytes]) -> tuple[bytes, ...]:
    if not frames:
        raise DecodeError(f"{verb.decode()} needs at least one key frame")
    keys = split_keys(frames)
    if len(keys) > MAX_KEYS:
        raise DecodeError(f"{verb.decode()} has {len(keys)} keys, at most {MAX_KEYS}")
    return tuple(keys)


def encode_consume(subscribe: Subscribe) -> list[bytes]:
    frames = [CONSUME, subscribe.topic.encode(), subscribe.group.encode(),
              b"%d" % subscribe.window]
    if subscribe.filter:
        frames.append(b"FILTER:" + subscribe.filter.encode())
    frames.append(b"START:%s" % str(subscribe.start).encode())
    frames += [b"CONFIRM:1"] if subscribe.confirm else []
    frames += [b"DECLARE:1"] if subscribe.declare else []
    frames += [b"ACK:" + key for key in subscribe.acked]
    frames += [PROTOCOL + b"%d" % subscribe.protocol] if subscribe.protocol > 1 else []
    return frames


def encode_keys(verb: bytes, keys: list[bytes] | tuple[bytes, ...],
                delay_ms: int = 0, protocol: int = 1) -> list[bytes]:
    """ACK, NACK (with a delay: DELAY:ms first), WORKING or REJECT of ``keys``: one
    frame each, or with protocol 2 all in one frame."""
    delay = [DELAY + b"%d" % delay_ms] if delay_ms else []
    if protocol > 1:
        return [verb, *delay, KEY_SEPARATOR.join(keys)]
    return [verb, *delay, *keys]


# -- node to consumer ------------------------------------------------------------

def deliver_head(routing_id: bytes, topic: bytes, group: bytes,
                 protocol: int = 1) -> list[bytes]:
    """The frames before a consumer's deliveries, the same for every one (built once):
    the routing id, the verb (DELIVER, or BATCH with protocol 2), topic and group;
    DELIVER's own frames then follow --send-dsn's layout."""
    return [routing_id, BATCH if protocol > 1 else DELIVER, topic, group]


def batch_entry(key: bytes, header_group: bytes, part_group: bytes) -> bytes:
    """One delivery in a BATCH's entries frame; the groups are counted, length-prefixed
    frames (``part_group`` as the stored record holds it, copied whole)."""
    return b"%c%s%s%s" % (len(key), key, header_group, part_group)


def plain_batch_entries(node_id: bytes, seqs: list[int], part_groups: list[bytes]
                        ) -> list[bytes]:
    """``batch_entry`` of each message (its key ``message_key(node_id, seq)``, no
    headers), in one pass: a run of deliveries to consumers that take no headers."""
    return plain_batch_run(node_id, seqs, part_groups)[0]


def plain_batch_run(node_id: bytes, seqs: list[int], part_groups: list[bytes]
                    ) -> tuple[list[bytes], bytes]:
    """``plain_batch_entries``, and the run's keys as one ACK of them all names them
    (``encode_keys`` with protocol 2: joined by KEY_SEPARATOR, what ``ack_many``
    sends), from the same hex digits."""
    head = b"%c%s-" % (len(message_key(node_id, 0)), node_id)  # every key is as long
    # the seqs' hex digits made in one pass (a % format a seq cost about as much again)
    if len(seqs) != len(part_groups):
        raise ValueError(f"{len(seqs)} seqs for {len(part_groups)} part groups")
    if not seqs:
        return [], b""
    digits = binascii.hexlify(struct.pack(b">%dQ" % len(seqs), *seqs), b" ", 8).split(b" ")
    entries = list(map(b"".join, zip(repeat(head), digits, repeat(NO_HEADER_GROUP),
                                     part_groups, strict=False)))  # (the repeats never end)
    key_head = head[1:]
    return entries, key_head + (KEY_SEPARATOR + key_head).join(digits)


def encode_consuming(routing_id: bytes, subscribe: Subscribe, heartbeat_ms: int) -> list[bytes]:
    frames = [routing_id, CONSUMING, subscribe.topic.encode(), subscribe.group.encode(),
              b"%d" % subscribe.window, b"%d" % heartbeat_ms]
    if subscribe.protocol > 1:  # only to a consumer that asked: 5 frames otherwise
        frames.append(PROTOCOL + b"%d" % subscribe.protocol)
    return frames


def encode_error(routing_id: bytes, text: str) -> list[bytes]:
    return [routing_id, ERROR, text.encode()]


def encode_refused(routing_id: bytes, keys: list[bytes] | tuple[bytes, ...]) -> list[bytes]:
    return [routing_id, REFUSED, ACK, *keys]


def decode_node_message(frames: list[bytes]) -> NodeMessage:
    """What a consumer's DEALER receives; DecodeError for anything else."""
    verb = frames[0] if frames else b""
    if verb == BATCH:
        return decode_batch(frames)
    if verb == DELIVER:
        return _decode_deliver(frames)
    if verb == HEARTBEAT:
        return NodeMessage(verb)
    if verb == ERROR and len(frames) == 2:
        return NodeMessage(verb, error=frames[1].decode(errors="replace"))
    if verb == REFUSED and len(frames) > 2 and frames[1] == ACK:
        return NodeMessage(verb, keys=tuple(frames[2:]))
    if verb == ACKED and len(frames) > 1:
        return NodeMessage(verb, keys=tuple(frames[1:]))
    if verb == CONSUMING and len(frames) in (5, 6) and frames[3].isdigit() \
            and frames[4].isdigit():
        return NodeMessage(verb, frames[1].decode(), frames[2].decode(),
                           window=int(frames[3]), heartbeat_ms=int(frames[4]),
                           protocol=_protocol_of(frames[5:]))
    raise DecodeError(f"unexpected message from the node: {frames[:2]!r}")


def _decode_deliver(frames: list[bytes]) -> NodeMessage:
    if len(frames) < 8:
        raise DecodeError(f"DELIVER has {len(frames)} frames, expected at least 8")
    # the empty frame is at 6, or after header frames with --delivery-headers
    try:
        delimiter = frames.index(b"", 6)
        sent_us, ack_timeout_us = int(frames[4]), int(frames[5])
    except ValueError:
        raise DecodeError("DELIVER has no empty frame or a time that is not decimal") from None
    return NodeMessage(DELIVER, frames[1].decode(), frames[2].decode(), frames[3], sent_us,
                       ack_timeout_us, parse_headers(frames[6:delimiter]),
                       tuple(frames[delimiter + 1:]))


def _protocol_of(frames: list[bytes]) -> int:
    """CONSUMING's last frame, when the node answers a PROTOCOL option."""
    if not frames:
        return 1
    number = frames[0][len(PROTOCOL):]
    if not frames[0].startswith(PROTOCOL) or not number.isdigit():
        raise DecodeError(f"CONSUMING's frame {frames[0][:40]!r} is not PROTOCOL:<number>")
    return int(number)


def decode_batch(frames: list[bytes]) -> NodeMessage:
    """A BATCH: its deliveries' keys, headers and parts, read in one pass."""
    if len(frames) != 6 or not frames[3].isdigit() or not frames[4].isdigit():
        raise DecodeError(f"BATCH has {len(frames)} frames or a time that is not "
                          "decimal, expected 6")
    try:
        entries = _batch_entries(frames[5])
    except (IndexError, DecodeError):
        raise DecodeError("BATCH's entries are truncated") from None
    return NodeMessage(BATCH, frames[1].decode(), frames[2].decode(), b"",
                       int(frames[3]), int(frames[4]), entries=entries)


def _batch_entries(data: bytes) -> tuple[tuple[bytes, tuple[bytes, ...],
                                               tuple[bytes, ...]], ...]:
    entries = []
    at, end = 0, len(data)
    while at < end:
        key_end = at + 1 + data[at]
        key = data[at + 1:key_end]
        headers, at = read_group(data, key_end)
        parts, at = read_group(data, at)
        entries.append((key, headers, parts))
    if at != end:
        raise DecodeError("BATCH's entries are truncated")
    return tuple(entries)
