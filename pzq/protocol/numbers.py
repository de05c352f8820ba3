"""Whole numbers in what a client sends (a frame, a monitor command's word), read
without letting the text decide how the node fails.

``str.isdigit`` takes '²' and the digits of other scripts, which ``int`` refuses or
reads; and ``int`` of a text of more than 4 300 digits raises ValueError (Python's
limit on such conversions). Either, from a CONSUME's ``START:`` or a producer's
``BATCH:`` count, ended the node's loop. ``whole_number`` takes ASCII digits alone,
and no more of them than its caller's largest value has.
"""

from __future__ import annotations

MOST_DIGITS = 19  # a µs time to the year 9999 has 18; a signed 64-bit number, 19


def whole_number(text: str | bytes, most_digits: int = MOST_DIGITS) -> int | None:
    """``text`` as a whole number 0 or more, when it is ASCII digits and, leading zeros
    aside, no more than ``most_digits`` of them; None for anything else (a caller whose
    largest value is shorter says "out of range" or "not a number" as it sees fit)."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    digits = text.lstrip("0") if isinstance(text, str) else text.lstrip(b"0")
    return int(digits or b"0") if len(digits) <= most_digits else None


def is_whole_number(text: str | bytes) -> bool:
    """ASCII digits, however many (a number too long for ``whole_number`` included)."""
    return bool(text) and text.isascii() and text.isdigit()
