"""The producer headers of time and order: ``DELAY:<ms>``, ``NOT-BEFORE:<µs since the
epoch>``, ``TTL:<ms>``, ``EXPIRES:<µs since the epoch>`` and ``PRIORITY:<0-9>``.

The node reads them once, at intake, into absolute times (``MessageTimes``): a delay
counts from when the node stores the message, and so does a TTL, so a message
delayed by an hour with a TTL of ten minutes is never delivered. A malformed or
out-of-range value is refused naming the header (ValueError), as are both of a pair
(DELAY with NOT-BEFORE, TTL with EXPIRES): the producer meant one time, and the node
cannot tell which. Header names match in any case, as every producer header's; a
repeated header's last value counts. The clients make the frames here too
(``time_headers``), so every shell sends what the node reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import NamedTuple

from pzq.clock import EPOCH
from pzq.protocol.numbers import whole_number

DELAY_HEADER = b"DELAY:"
NOT_BEFORE_HEADER = b"NOT-BEFORE:"
TTL_HEADER = b"TTL:"
EXPIRES_HEADER = b"EXPIRES:"
PRIORITY_HEADER = b"PRIORITY:"

MAX_PRIORITY = 9
MAX_SPAN_MS = 100 * 366 * 24 * 3_600_000  # a delay or TTL: a century at most
MAX_TIME_US = 253_402_300_799_999_999  # the last µs of the year 9999
NEVER = 0  # no due time (deliver at once) / no expiry


class MessageTimes(NamedTuple):
    """What a message's headers say of time and order, in absolute µs since the epoch
    (0: none given)."""

    due_us: int  # not delivered before
    expires_us: int  # never delivered from then on
    priority: int


NO_TIMES = MessageTimes(NEVER, NEVER, 0)

_PRIORITY_UNIT = "a priority"
# each header's name: (most, unit, least) of its whole-number value
_RANGES = {b"DELAY": (MAX_SPAN_MS, "milliseconds", 0),
           b"NOT-BEFORE": (MAX_TIME_US, "µs since the epoch", 0),
           b"TTL": (MAX_SPAN_MS, "milliseconds", 1),
           b"EXPIRES": (MAX_TIME_US, "µs since the epoch", 0),
           b"PRIORITY": (MAX_PRIORITY, _PRIORITY_UNIT, 0)}
# the first letters of the five names, upper case: a header that starts otherwise is
# not one of them (the common TOPIC:, TAG:, KEY: frames are passed by one test)
_FIRST = frozenset(name[0] for name in _RANGES)


def message_times(headers: Iterable[bytes], now_us: int) -> MessageTimes:
    """The message's times, given when the node stores it (``now_us``); NO_TIMES when
    it names none. ValueError naming the header that is malformed or out of range."""
    given: dict[bytes, int] = {}
    for header in headers:
        if not header or header[0] & 0xDF not in _FIRST:
            continue
        name, _, value = header.partition(b":")
        name = name.upper()
        if name in _RANGES:
            given[name] = _whole(value, name.decode(), *_RANGES[name])
    if not given:
        return NO_TIMES
    if b"DELAY" in given and b"NOT-BEFORE" in given:
        raise ValueError("DELAY and NOT-BEFORE both given: give one")
    if b"TTL" in given and b"EXPIRES" in given:
        raise ValueError("TTL and EXPIRES both given: give one")
    delay, ttl = given.get(b"DELAY"), given.get(b"TTL")
    due = now_us + delay * 1000 if delay is not None else given.get(b"NOT-BEFORE", NEVER)
    ends = now_us + ttl * 1000 if ttl is not None else given.get(b"EXPIRES", NEVER)
    return MessageTimes(due, ends, given.get(b"PRIORITY", 0))


def time_headers_of(headers: Iterable[bytes]) -> tuple[str, ...]:
    """The time headers among a message's, as text, as they were sent (for the
    archive's metadata)."""
    return tuple(header.decode(errors="replace") for header in headers
                 if header and header[0] & 0xDF in _FIRST
                 and header.partition(b":")[0].upper() in _RANGES)


def _whole(value: bytes, name: str, most: int, unit: str, least: int = 0) -> int:
    """The header's value as a whole number from ``least`` to ``most``."""
    text = value.decode(errors="replace")
    if not value.isdigit():
        # a priority is not counted in units: "a whole number of a priority" said nothing
        what = f"from {least} to {most} ({unit})" if unit == _PRIORITY_UNIT else f"of {unit}"
        raise ValueError(f"{name}:{text[:40]} is not a whole number {what}")
    # more digits than the limit has are out of range, not "not whole" (and no int() of
    # a frame of thousands of digits); leading zeros do not count
    number = whole_number(value, len(str(most)))
    if number is None or not least <= number <= most:
        raise ValueError(f"{name}:{text[:40]} is out of range: give {least} to {most} "
                         f"({unit})")
    return number


# -- the clients' side ---------------------------------------------------------------

Moment = datetime | int | float  # an aware datetime or µs since the epoch


def time_headers(delay: float | None = None, not_before: Moment | None = None,
                 ttl: float | None = None, expires: Moment | None = None,
                 priority: int | None = None) -> list[bytes]:
    """The header frames of a message's time options: ``delay`` and ``ttl`` in seconds,
    ``not_before`` and ``expires`` a datetime or µs since the epoch, ``priority``
    0-9. ValueError for a value the node would refuse, or a pair it would (a delay
    with a not_before, a ttl with an expires: one time each)."""
    for first, second, one, other in ((delay, not_before, "delay", "not_before"),
                                      (ttl, expires, "ttl", "expires")):
        if first is not None and second is not None:
            raise ValueError(f"{one} and {other} both given: give one")
    found: list[bytes] = []
    if delay is not None:
        found.append(DELAY_HEADER + b"%d" % _milliseconds(delay, "delay", 0))
    if not_before is not None:
        found.append(NOT_BEFORE_HEADER + b"%d" % epoch_us(not_before, "not_before"))
    if ttl is not None:
        found.append(TTL_HEADER + b"%d" % _milliseconds(ttl, "ttl", 1))
    if expires is not None:
        found.append(EXPIRES_HEADER + b"%d" % epoch_us(expires, "expires"))
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) \
                or not 0 <= priority <= MAX_PRIORITY:
            raise ValueError(f"priority must be a whole number from 0 to {MAX_PRIORITY}, "
                             f"got {priority!r}")
        found.append(PRIORITY_HEADER + b"%d" % priority)
    return found


def _milliseconds(seconds: float, name: str, least: int) -> int:
    if not _finite_number(seconds):
        raise ValueError(f"{name} must be a number of seconds from {least / 1000:g} s to "
                         f"a century, got {seconds!r}")
    milliseconds = round(seconds * 1000)
    if not least <= milliseconds <= MAX_SPAN_MS:
        raise ValueError(f"{name} must be from {least / 1000:g} s to a century, "
                         f"got {seconds!r} s")
    return milliseconds


def epoch_us(moment: Moment, name: str) -> int:
    """µs since the epoch of an aware datetime or of a number of µs. ValueError for a
    naive datetime: Python takes one for local time (``datetime.now()``, its
    ``timestamp()``), a program may have meant UTC (``utcnow()``), and the hours
    between are a message delivered or expired that much early or late, silently. A
    text without a zone is read as UTC before (``iso_moment``)."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError(f"{name} is a datetime without a time zone ({moment.isoformat()}): "
                             "give it one, e.g. datetime.now(UTC) + timedelta(hours=1) "
                             "(datetime.UTC, or datetime.timezone.utc)")
        delta = moment - EPOCH
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    elif _finite_number(moment):
        value = int(moment)
    else:
        value = -1  # a text, NaN, infinity: no time (int() took "5" and failed on the rest)
    if not 0 <= value <= MAX_TIME_US:
        raise ValueError(f"{name} must be a time from 1970 to 9999, got {moment!r}")
    return value


def iso_moment(text: str) -> datetime:
    """An ISO 8601 time as the tools take it: without a zone, UTC. ValueError if it
    is none."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)
