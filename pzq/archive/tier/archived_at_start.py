"""The messages a node killed mid-ACK left both archived and stored, found at start.

A message is appended to the archive before its store delete is written (see
pzq.archive.tier.archiving). A node killed between the two (a SIGKILL in the same
wake, or a power cut that kept the archive's fsync'd record and lost the store's
unsynced delete) still holds the message: it is delivered again after the restart,
and its second ACK would archive it a second time. Such records are the end of their
topic's log: a wake's records are appended before its deletes are written, and the
wakes before it had theirs written (a power cut, too, loses a suffix of the store's
log). So at start each topic's log is read from its end while its records' messages
are still stored (the same key and time stored): a tail of FIRST_TAIL_BYTES, grown
while all its records are, up to LONGEST_TAIL_BYTES. Those are kept here; a later
archive write of one of them is skipped, once, and the store's delete goes ahead as
if it had been written.
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.archive.format.entry import ArchivedMessage
from pzq.errors import DecodeError
from pzq.protocol.message_keys import parse_message_key
from pzq.store import keyspace, record
from pzq.store.store import Store

# of each topic's log: a tail that holds a wake's records (mostly none are still
# stored, and one look at the last record ends it), and the most it grows to
FIRST_TAIL_BYTES = 64 << 10
LONGEST_TAIL_BYTES = 32 << 20

# The time stored of the message the store holds under a message key (None: none).
StoredAt = Callable[[bytes], int | None]
# A topic log's records of its last so many bytes, oldest first.
Tail = Callable[[int], list[ArchivedMessage]]


class ArchivedAtStart:
    def __init__(self) -> None:
        self._stored_us: dict[bytes, int] = {}  # message key: time stored

    def __bool__(self) -> bool:
        return bool(self._stored_us)

    def __len__(self) -> int:
        return len(self._stored_us)

    def find(self, tail: Tail, stored_at: StoredAt) -> None:
        """Keep the archived messages at the end of a topic's log (``tail``) that the
        store still holds."""
        size, records = FIRST_TAIL_BYTES, 0
        while True:
            messages = tail(size)
            held = 0
            for message in reversed(messages):
                if stored_at(message.key) != message.stored_us:
                    break
                held += 1
            if held < len(messages) or len(messages) == records or size >= LONGEST_TAIL_BYTES:
                break  # (a record not held, the whole log read, or as far as it goes)
            size, records = size * 4, len(messages)
        for message in messages[len(messages) - held:]:
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
