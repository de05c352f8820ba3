"""Own messages the peers still have out with their consumers (from their PONGs): a
node that took them over while this one was away serves them until it lets them go.
The delivery states ask it per message (pzq.delivery.held); the cluster updates it.
"""

from __future__ import annotations


class PeerHolds:
    def __init__(self) -> None:
        self._held: dict[str, set[int]] = {}  # peer endpoint -> own seqs it has out

    def holds(self, seq: int) -> bool:
        for held in self._held.values():
            if seq in held:
                return True
        return False

    def any(self) -> bool:
        return any(self._held.values())

    def lowest(self) -> int | None:
        """Below which a group's floor must stay: the group skipped it, not finished it."""
        return min((min(held) for held in self._held.values() if held), default=None)

    def count(self, endpoint: str) -> int:
        return len(self._held.get(endpoint, ()))

    def update(self, endpoint: str, held: set[int]) -> bool:
        """What the peer has out now; True when it let some go."""
        released = self._held.get(endpoint, set()) - held
        self._held[endpoint] = held
        return bool(released)

    def drop(self, endpoint: str) -> bool:
        """The peer went down: its consumers cannot ACK what it had out. True when it
        had some."""
        return bool(self._held.pop(endpoint, None))
