"""The consume endpoint's frames (--consume-dsn), as pure functions (docs/groups.rst,
"The consume endpoint"). Every message starts with a verb frame, in both directions.

Consumer (DEALER) to node::

    CONSUME | topic | group | window | option...     option: FILTER:tag, FILTER:prefix*,
                                                      START:earliest|latest|<µs since epoch>,
                                                      ACK:key (repeatable: ACKs a node that
                                                      did not know the connection refused),
                                                      CONFIRM:1 (answer ACKs once written),
                                                      DECLARE:1 (make the topic if missing)
    ACK | key | key...        done with these deliveries
    NACK | key | key...       give them back, to be delivered again
    NACK | DELAY:ms | key...  give them back, to go again after ms milliseconds
    WORKING | key | key...    still at work on them: each deadline starts again
    REJECT | key | key...     give them up now: to the dead letters, never again
    HEARTBEAT                 accepted, not needed: a consumer is alive while its
                              connection is (ZeroMQ's heartbeats)
    BYE                       going away: give back what is unacked, at once

Node to consumer::

    CONSUMING | topic | group | window | heartbeat ms
    DELIVER | topic | group | key | sent µs | ack timeout µs | (empty) | part 1 | ... | part N
        (with --delivery-headers: DELIVERY:n and the producer's headers before the empty frame)
    HEARTBEAT                 seldom: to find a consumer whose connection went
    ERROR | what was wrong
    REFUSED | ACK | key...    after the ERROR of an ACK on a connection the node does not
                              know (it restarted): the keys, to send again with CONSUME
    ACKED | key | key...      with CONFIRM:1, the ACKs that took effect (written), after
                              the batch that wrote them
"""

from __future__ import annotations

from dataclasses import dataclass

from pzq.errors import DecodeError
from pzq.protocol.frames import parse_headers

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
DELAY = b"DELAY:"
MAX_DELAY_MS = 7 * 24 * 3600 * 1000  # a NACK's delay: a week at most
REQUESTS = (CONSUME, ACK, NACK, WORKING, REJECT, HEARTBEAT, BYE)
VERBS_TEXT = "send CONSUME, ACK, NACK, WORKING, REJECT, HEARTBEAT or BYE"
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


@dataclass(frozen=True, slots=True)
class Request:
    verb: bytes
    subscribe: Subscribe | None = None  # CONSUME
    keys: tuple[bytes, ...] = ()  # ACK, NACK, WORKING, REJECT
    delay_ms: int = 0  # NACK with DELAY:ms


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


# -- consumer to node ----------------------------------------------------------

def decode_request(frames: list[bytes]) -> Request:
    """A request after the ROUTER's routing id; DecodeError says what is wrong."""
    if not frames:
        raise DecodeError(f"empty request; {VERBS_TEXT}")
    verb, rest = frames[0], frames[1:]
    if verb == CONSUME:
        return Request(verb, subscribe=_decode_subscribe(rest))
    if verb == NACK and rest and rest[0].startswith(DELAY):
        return Request(verb, keys=_decode_keys(verb, rest[1:]), delay_ms=_delay_ms(rest[0]))
    if verb in (ACK, NACK, WORKING, REJECT):
        return Request(verb, keys=_decode_keys(verb, rest))
    if verb in (HEARTBEAT, BYE):
        if rest:
            raise DecodeError(f"{verb.decode()} takes no frames after it, got {len(rest)}")
        return Request(verb)
    shown = verb[:40].decode(errors="replace")
    raise DecodeError(f"unknown request {shown!r}; {VERBS_TEXT}")


def _delay_ms(frame: bytes) -> int:
    text = frame[len(DELAY):]
    if not text.isdigit() or int(text) > MAX_DELAY_MS:
        raise DecodeError(f"NACK {frame[:40]!r} is not DELAY:<milliseconds, at most "
                          f"{MAX_DELAY_MS}>")
    return int(text)


def _decode_subscribe(frames: list[bytes]) -> Subscribe:
    if len(frames) < 3:
        raise DecodeError(f"CONSUME needs topic, group and window frames, got {len(frames)}")
    topic, group, window_text = (frame.decode(errors="replace") for frame in frames[:3])
    if not window_text.isdigit() or not 1 <= int(window_text) <= MAX_WINDOW:
        raise DecodeError(f"CONSUME window {window_text[:20]!r} is not a number from 1 to "
                          f"{MAX_WINDOW}")
    options: dict[str, str | int | bool] = {}
    acked: list[bytes] = []
    for frame in frames[3:]:
        if frame[:4].upper() == b"ACK:" and len(acked) < MAX_KEYS:
            acked.append(frame[4:])
            continue
        name, sep, value = frame.decode(errors="replace").partition(":")
        name = name.upper()
        if name in ("CONFIRM", "DECLARE") and value in ("0", "1"):
            options[name.lower()] = value == "1"
        elif sep and name in ("FILTER", "START"):
            options[name.lower()] = decode_start(value) if name == "START" else value
        else:
            raise DecodeError(f"CONSUME option {frame[:40]!r} is not FILTER:value, "
                              "START:earliest|latest|<µs since the epoch>, ACK:key, "
                              "CONFIRM:0|1 or DECLARE:0|1")
    return Subscribe(topic, group, int(window_text), acked=tuple(acked),
                     **options)  # type: ignore[arg-type]


def decode_start(value: str) -> str | int:
    if value in START_WORDS:
        return value
    if value.isdigit():
        return int(value)
    raise DecodeError(f"START:{value[:40]} is not earliest, latest or µs since the epoch")


def ack_keys(frames: list[bytes]) -> list[bytes] | None:
    """The keys of a well-formed ACK (the common request, read without building a
    Request); None for anything else, which decode_request reads and judges."""
    if len(frames) > 1 and frames[0] == ACK and len(frames) <= MAX_KEYS + 1:
        return frames[1:]
    return None


def _decode_keys(verb: bytes, frames: list[bytes]) -> tuple[bytes, ...]:
    if not frames:
        raise DecodeError(f"{verb.decode()} needs at least one key frame")
    if len(frames) > MAX_KEYS:
        raise DecodeError(f"{verb.decode()} has {len(frames)} keys, at most {MAX_KEYS}")
    return tuple(frames)


def encode_consume(subscribe: Subscribe) -> list[bytes]:
    frames = [CONSUME, subscribe.topic.encode(), subscribe.group.encode(),
              b"%d" % subscribe.window]
    if subscribe.filter:
        frames.append(b"FILTER:" + subscribe.filter.encode())
    frames.append(b"START:%s" % str(subscribe.start).encode())
    frames += [b"CONFIRM:1"] if subscribe.confirm else []
    frames += [b"DECLARE:1"] if subscribe.declare else []
    frames += [b"ACK:" + key for key in subscribe.acked]
    return frames


def encode_keys(verb: bytes, keys: list[bytes] | tuple[bytes, ...],
                delay_ms: int = 0) -> list[bytes]:
    """ACK, NACK (with a delay: DELAY:ms first), WORKING or REJECT of ``keys``."""
    return [verb, *([DELAY + b"%d" % delay_ms] if delay_ms else []), *keys]


# -- node to consumer ------------------------------------------------------------

def deliver_head(routing_id: bytes, topic: bytes, group: bytes) -> list[bytes]:
    """The frames before a delivery in --send-dsn's layout: the routing id, the verb,
    topic and group, the same for every delivery to a consumer (built once)."""
    return [routing_id, DELIVER, topic, group]


def encode_consuming(routing_id: bytes, subscribe: Subscribe, heartbeat_ms: int) -> list[bytes]:
    return [routing_id, CONSUMING, subscribe.topic.encode(), subscribe.group.encode(),
            b"%d" % subscribe.window, b"%d" % heartbeat_ms]


def encode_error(routing_id: bytes, text: str) -> list[bytes]:
    return [routing_id, ERROR, text.encode()]


def encode_refused(routing_id: bytes, keys: list[bytes] | tuple[bytes, ...]) -> list[bytes]:
    return [routing_id, REFUSED, ACK, *keys]


def decode_node_message(frames: list[bytes]) -> NodeMessage:
    """What a consumer's DEALER receives; DecodeError for anything else."""
    verb = frames[0] if frames else b""
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
    if verb == CONSUMING and len(frames) == 5 and frames[3].isdigit() and frames[4].isdigit():
        return NodeMessage(verb, frames[1].decode(), frames[2].decode(),
                           window=int(frames[3]), heartbeat_ms=int(frames[4]))
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
