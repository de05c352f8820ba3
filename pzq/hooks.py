"""Which of many objects have their own version of a step their base class leaves
empty: a wake asks only those, not every part or store participant each time."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def nothing() -> None:
    """What a hook no one set calls."""


def overriding(objects: list[T], base: type, step: str) -> list[T]:
    """The objects whose ``step`` is their own: their class's, or set on the object,
    rather than ``base``'s (which does nothing)."""
    empty = getattr(base, step)
    return [item for item in objects
            if getattr(type(item), step) is not empty or step in getattr(item, "__dict__", {})]
