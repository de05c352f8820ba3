"""The messages a node killed mid-ACK left both archived and stored, found at start.

A message is appended to the archive before its store delete is written (see
pzq.archive.tier.archiving). A node killed between the two (a SIGKILL in the same
wake, or a power cut that kept the archive's fsync'd record and lost the store's
unsynced delete) still holds the message: it is delivered again after the restart,
and its second ACK would archive it a second time. At start, the records of the last
TAIL_BYTES of each topic's log whose message the store still holds (the same key and
time stored) are kept here; a later archive write of one of them is skipped, once,
and the store's delete goes ahead as if it had been written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pzq.archive.format.entry import ArchivedMessage
from pzq.errors import DecodeError
from pzq.protocol.message_keys import parse_message_key
from pzq.store import keyspace, record
from pzq.store.store import Store

TAIL_BYTES = 2 << 20  # of each topic's log: far more than a wake's records (~0.15 s)

# The time stored of the message the store holds under a message key (None: none).
StoredAt = Callable[[bytes], int | None]


class ArchivedAtStart:
    def __init__(self) -> None:
        self._stored_us: dict[bytes, int] = {}  # message key: time stored

    def __bool__(self) -> bool:
        return bool(self._stored_us)

    def __len__(self) -> int:
        return len(self._stored_us)

    def find(self, tail: Iterable[ArchivedMessage], stored_at: StoredAt) -> None:
        """Keep each archived message of ``tail`` the store still holds."""
        for message in tail:
            if stored_at(message.key) == message.stored_us:
                self._stored_us[message.key] = message.stored_us

    def take(self, key: bytes, stored_us: int) -> bool:
        """Whether this message is in the archive already (then forgotten: its store
        delete follows, it is not met again)."""
        if self._stored_us.get(key) != stored_us:
            return False
        del self._stored_us[key]
        return True


def stored_at_in(store: Store) -> StoredAt:
    """``StoredAt`` of a node's store: its own messages, and its copies of its peers'."""
    def stored_at(key: bytes) -> int | None:
        try:
            node_id, seq = parse_message_key(key)
        except DecodeError:
            return None
        value = (store.get_own(seq) if node_id == store.node_id
                 else store.get(keyspace.replica_key(node_id, seq)))
        if value is None:
            return None
        try:
            return record.decode(value).stored_us
        except DecodeError:
            return None
    return stored_at
