"""When the loop must wake next, told by the parts rather than asked at every wake.

A part that keeps an agenda entry is asked its wait (``timeout_ms``) only when it
said that the wait may have become shorter (``changed``: a scheduled message stored,
the log written after a sync, a socket left with input unread) and when the deadline
of its last answer comes. A wait that grows (what was due went) needs no word: the
part is asked at the old deadline and answers anew. So a wake in which nothing changed
costs the loop one comparison, however many parts have timers.

The same way, a part that has nothing for a step of the wake (``take``, ``finish``,
``send_out``, ``answer``) says so (``rest``) and is not asked at that step until it
says it has (``ask``), or, if it named one, until the poll finds input on its quiet
socket's descriptor: a wake asks only the parts with work, not each to answer that
it has none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from pzq.clock import Now

NEVER = math.inf
AT_ONCE = -math.inf


class Timed(Protocol):
    def timeout_ms(self, now: Now) -> int | None: ...


class Agenda:
    def __init__(self) -> None:
        self._due: dict[Timed, float] = {}  # monotonic seconds; AT_ONCE: ask again
        self._soonest = NEVER
        # (part, step) -> the descriptor whose input still asks it then (None: nothing)
        self._resting: dict[tuple[object, str], int | None] = {}
        self.on_roll: Callable[[str], None] = _nothing  # a step's parts changed (the loop)

    def rest(self, part: object, step: str, until_input: int | None = None) -> None:
        """``part`` has nothing for ``step`` until it says ``ask``: wakes skip it there,
        but for a wake whose poll found input on ``until_input`` (a quiet socket's
        descriptor, which the loop polls)."""
        if self._resting.get((part, step), -1) != until_input:
            self._resting[(part, step)] = until_input
            self.on_roll(step)

    def ask(self, part: object, step: str) -> None:
        """``part`` has work for ``step``: from now on each wake asks it there again."""
        if (part, step) in self._resting:
            del self._resting[(part, step)]
            self.on_roll(step)

    def resting(self, part: object, step: str) -> bool:
        return (part, step) in self._resting

    def woken_by(self, part: object, step: str) -> int | None:
        """The descriptor whose input asks a resting part at ``step`` (None: none)."""
        return self._resting.get((part, step))

    def keep(self, timed: Timed) -> None:
        """An entry for ``timed``, asked at the next wake."""
        self.changed(timed)

    def changed(self, timed: Timed) -> None:
        """``timed``'s wait may be shorter than it last said: ask it before the next poll."""
        self._due[timed] = AT_ONCE
        self._soonest = AT_ONCE

    def changed_at(self, timed: Timed, step: str) -> None:
        """``changed``, and ``timed`` has work for ``step`` again (``ask``): what a part
        told of new work says (input waiting, something due)."""
        self.changed(timed)
        self.ask(timed, step)

    def timeout_ms(self, now: Now) -> int | None:
        """The poll's longest wait for the entries (None: none has a deadline)."""
        mono = now.mono
        if self._soonest <= mono:
            self._soonest = self._ask(now)
        if self._soonest == NEVER:
            return None
        # whole milliseconds, rounded up from whole µs (not from a float's last bits),
        # by integers alone
        wait_us = round((self._soonest - mono) * 1_000_000)
        return -(-wait_us // 1000) if wait_us > 0 else 0

    def _ask(self, now: Now) -> float:
        """Asks the entries whose deadline came or that changed; the soonest deadline."""
        mono = now.mono
        due = self._due
        for timed, at in list(due.items()):
            if at <= mono:
                wait = timed.timeout_ms(now)
                due[timed] = NEVER if wait is None else mono + wait / 1000
        return min(due.values(), default=NEVER)


def _nothing(step: str) -> None:
    pass
