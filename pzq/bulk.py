"""Loops over the many keys of one request run in C, not in Python: an ACK of n keys
costs a fixed number of Python calls and n steps of C (``map`` over a bound method),
where a Python loop would cost a call or more per key."""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from itertools import chain
from typing import Any


def each(function: Callable[..., Any], *iterables: Iterable[Any]) -> None:
    """``function`` over the items of ``iterables`` in step, results dropped (a map run
    to its end by a deque that keeps nothing)."""
    deque(map(function, *iterables), maxlen=0)


CUT_AT_ONCE = 128  # pieces a struct of ``cut`` makes at once (its size stays small)


def cut(data: bytes, size: int, count: int) -> Sequence[bytes]:
    """``data`` cut into ``count`` pieces of ``size`` bytes (``len(data)`` must be
    ``size * count``) by struct unpacks of up to CUT_AT_ONCE pieces: no object a piece
    but the piece."""
    if count <= CUT_AT_ONCE:
        pieces: tuple[bytes, ...] = _cuts(size, count).unpack(data)
        return pieces
    whole = count - count % CUT_AT_ONCE
    found = list(chain.from_iterable(
        _cuts(size, CUT_AT_ONCE).iter_unpack(memoryview(data)[:whole * size])))
    if whole < count:
        found += _cuts(size, count - whole).unpack_from(data, whole * size)
    return found


@lru_cache(maxsize=64)
def _cuts(size: int, count: int) -> struct.Struct:
    return struct.Struct(f"{size}s" * count)


def low_high(numbers: Iterable[int]) -> tuple[int, int]:
    """The lowest and the highest of ``numbers`` (at least one), by one sort: ``min`` and
    ``max`` make a full rich compare of each (about 100 instructions for two ints that
    are not the same object, as an ACK's seqs never are), where a sort of ints compares
    their digits in C (a run's seqs, in order already, in one pass)."""
    ordered = sorted(numbers)
    return ordered[0], ordered[-1]


def lowest(numbers: Iterable[int], default: int) -> int:
    """``min(numbers, default=default)``, as ``low_high`` finds it."""
    ordered = sorted(numbers)
    return ordered[0] if ordered else default

