"""Loops over the many keys of one request run in C, not in Python: an ACK of n keys
costs a fixed number of Python calls and n steps of C (``map`` over a bound method),
where a Python loop would cost a call or more per key."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any


def each(function: Callable[..., Any], *iterables: Iterable[Any]) -> None:
    """``function`` over the items of ``iterables`` in step, results dropped (a map run
    to its end by a deque that keeps nothing)."""
    deque(map(function, *iterables), maxlen=0)
