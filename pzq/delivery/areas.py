"""The store areas a DeliveryState can deliver from: this node's own messages, or
the replicas of a node that is down and whose delivery this node has taken over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pzq.store.replicas import ReplicaStore
from pzq.store.store import Batch, Store


class Area(Protocol):
    node_id: bytes  # the node whose message keys these are

    def end_seq(self) -> int: ...
    def read(self, start_seq: int, limit: int) -> list[tuple[int, bytes]]: ...
    def get(self, seq: int) -> bytes | None: ...
    def delete(self, batch: Batch, seq: int, size: int) -> None: ...
    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None: ...
    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None: ...
    def group_names(self, seq: int) -> tuple[str, ...]: ...


class OwnArea:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.node_id = store.node_id

    def end_seq(self) -> int:
        return self.store.next_seq

    def read(self, start_seq: int, limit: int) -> list[tuple[int, bytes]]:
        return self.store.read_own(start_seq, limit)

    def get(self, seq: int) -> bytes | None:
        return self.store.get_own(seq)

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        batch.delete_message(seq, size)

    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None:
        batch.rewrite_message(seq, value)

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        batch.dead_letter(seq, value, len(value))

    def group_names(self, seq: int) -> tuple[str, ...]:
        """Consumer groups done with the message, for the archive (none: only default)."""
        return ()


class TakeoverArea:
    """Replicas of a down node that this node is first in line to deliver, to the
    group ``default``: a copy of a topic ``default`` does not read stays held for the
    origin's named groups, not delivered to --send-dsn."""

    def __init__(self, replicas: ReplicaStore, origin: bytes,
                 is_mine: Callable[[tuple[bytes, ...]], bool]) -> None:
        self.replicas = replicas
        self.node_id = origin
        self.is_mine = is_mine

    def end_seq(self) -> int:
        return self.replicas.end_seq(self.node_id)

    def read(self, start_seq: int, limit: int) -> list[tuple[int, bytes]]:
        return [(seq, value) for seq, holders, value
                in self.replicas.read(self.node_id, start_seq, limit, self._serves)]

    def _serves(self, seq: int, holders: tuple[bytes, ...], value: bytes) -> bool:
        return self.is_mine(holders) and self.replicas.default_holds(self.node_id, seq, value)

    def get(self, seq: int) -> bytes | None:
        found = self.replicas.get(self.node_id, seq)
        if found is None or not self.replicas.default_holds(self.node_id, seq, found[1]):
            return None
        return found[1]

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        self.replicas.remove(batch, self.node_id, seq, tombstone=True)

    def group_names(self, seq: int) -> tuple[str, ...]:
        return ()

    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None:
        """Delivery bookkeeping of replicas stays in memory: the origin owns the record."""

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        """Given up while its origin is down: kept in this node's own dead letters,
        and a tombstone tells the origin it is done with when it comes back."""
        self.replicas.remove(batch, self.node_id, seq, tombstone=True)
        batch.add_dead_letter(value)
