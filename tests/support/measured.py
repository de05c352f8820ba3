"""A record that counts how often its length is asked: for the tests that a read's
records are measured once, not once a group."""

from __future__ import annotations


class Measured(bytes):
    """A record that counts each time its length is asked (``Measured.asked``)."""

    asked = 0

    def __len__(self) -> int:
        Measured.asked += 1
        return super().__len__()
