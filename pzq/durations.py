"""Durations for the daemon's time options: plain microseconds, or a number with a unit."""

from __future__ import annotations

import re
from fractions import Fraction

from pzq.protocol.time_headers import MAX_SPAN_MS

UNITS_US = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000,
            "min": 60_000_000, "h": 3_600_000_000,
            "d": 86_400_000_000}
# ASCII digits, and not so many that float() makes them infinity (which round() cannot
# take: a dedup_window= of 400 digits on the monitor socket ended the node's loop)
PATTERN = re.compile(r"^(-?[0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([a-zµ]*)$")
EXAMPLES = "microseconds (5000000) or a number with a unit: 250ms, 5s, 2m, 1h, 2d"
CENTURY_US = MAX_SPAN_MS * 1000  # the longest duration the node takes anywhere
CENTURY = "36600d (a century)"


class DurationError(ValueError):
    """A text that is not a duration."""


def duration_us(text: str) -> int:
    """``5000000`` -> 5000000; ``250ms`` -> 250000; ``5s``, ``2m``, ``1h``, ``1.5s`` alike.
    Exact, whatever its size (a fraction: a float gave ``99999999999999d`` as
    8639999999999913698000896 µs, digits no one wrote); half a µs rounds to even."""
    match = PATTERN.match(text.strip())
    if match is None or match.group(2) not in ("", *UNITS_US):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise DurationError(f"{shown} is not a duration: give {EXAMPLES}")
    number, unit = match.groups()
    if not unit and "." in number:
        raise DurationError(f"{text} has no unit, so it would be microseconds, which are "
                            f"whole: did you mean {text}s?")
    return round(Fraction(number) * UNITS_US.get(unit, 1))


def duration_text(us: int) -> str:
    """The largest unit that states ``us`` exactly, as the options take it back:
    5000000 -> ``5s``, 2500000 -> ``2500ms``, 90000000 -> ``90s``, 0 -> ``0``."""
    if us == 0:
        return "0"
    for unit in ("d", "h", "m", "s", "ms"):
        if us % UNITS_US[unit] == 0:
            return f"{us // UNITS_US[unit]}{unit}"
    return f"{us}us"
