"""Whether another node has one of this node's messages out (it took it over while
this node was away): such a message is not delivered here until it is let go.

A delivery state is given this at its creation and asks it once per message it
looks at; the cluster keeps the answer (pzq.cluster.held). A node without a cluster,
and a state of taken-over messages, ask ``NOBODY_ELSE``.
"""

from __future__ import annotations

from typing import Protocol


class HeldElsewhere(Protocol):
    def holds(self, seq: int) -> bool: ...  # another node has this own message out

    def any(self) -> bool: ...  # another node has any own message out

    def lowest(self) -> int | None: ...  # the lowest one (None: none)


class NobodyElse:
    """No other node has any of this node's messages out."""

    def holds(self, seq: int) -> bool:
        return False

    def any(self) -> bool:
        return False

    def lowest(self) -> int | None:
        return None


NOBODY_ELSE = NobodyElse()
