"""Figures rounded for people: rates, durations and sizes as an operator reads them.

monitoring's status page formats the same way in JavaScript; keep the two alike.
"""

from __future__ import annotations

from pzq.client.common import messages as messages  # the tools say counts so too


def rate(per_second: float) -> str:
    """``0``, ``0.35``, ``7.5``, ``42``, ``12,345``: about three significant digits."""
    if per_second == 0:
        return "0"
    if abs(per_second) < 10:
        return f"{per_second:.2f}".rstrip("0").rstrip(".")
    if abs(per_second) < 100:
        return f"{per_second:.1f}".rstrip("0").rstrip(".")
    return f"{per_second:,.0f}"


def duration(seconds: float) -> str:
    """``850 ms``, ``13.2 s``, ``6 min 43 s``, ``5 min``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        big, big_unit, small, small_unit = whole // 60, "min", whole % 60, "s"
    elif whole < 86400:
        big, big_unit, small, small_unit = whole // 3600, "h", whole % 3600 // 60, "min"
    else:
        big, big_unit, small, small_unit = whole // 86400, "d", whole % 86400 // 3600, "h"
    return f"{big} {big_unit}" + (f" {small} {small_unit}" if small else "")


def latency_ms(milliseconds: float) -> str:
    """A latency given in ms: ``0.42 ms``, ``3.5 ms``, ``250 ms``, ``13.2 s``."""
    if milliseconds >= 1000:
        return duration(milliseconds / 1000)
    if milliseconds >= 100:
        return f"{milliseconds:.0f} ms"
    if milliseconds >= 10:
        return f"{milliseconds:.1f} ms"
    return f"{milliseconds:.2f} ms"


def size(count: float) -> str:
    """Bytes as ``512 B``, ``3.4 KB``, ``12 MB``, ``1.5 GB`` (powers of 1000)."""
    units = ("B", "KB", "MB", "GB", "TB")
    index = 0
    while abs(count) >= 1000 and index < len(units) - 1:
        count /= 1000
        index += 1
    if index == 0 or abs(count) >= 10:
        return f"{count:.0f} {units[index]}"
    return f"{count:.1f} {units[index]}"


def count(value: float) -> str:
    """A count with thousands separators: ``1,234,567``."""
    return f"{value:,.0f}"


