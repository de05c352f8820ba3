"""Administration over the monitor socket: the dead letters (used by pzq-ctl).

    DEAD [limit]          list dead letters: key, producer msg id, deliveries, bytes
    REQUEUE key|ALL       deliver again (as a new message, its count starting over;
                          copied to the peers as a new message is)
    PURGE key|ALL         delete for good
    PENDING               stored, dead and in-flight counts
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from pzq.admin.usage import shown_words
from pzq.clock import Now
from pzq.delivery.state import DeliveryState
from pzq.errors import DecodeError, StoreError
from pzq.parts import Verb
from pzq.protocol.message_keys import message_key, parse_message_key
from pzq.protocol.numbers import is_whole_number, whole_number
from pzq.store import keyspace, record
from pzq.store.batch import Batch
from pzq.store.store import Store

DEFAULT_LIST = 100
MOST_PER_COMMAND = 100_000
Requeued = Callable[[Batch, int, bytes], None]  # a message stored again: into its topic's log
# requeued messages once written (monotonic now): to the peers, as new messages are
Copy = Callable[[list[tuple[int, bytes]], float], None]


class Admin:
    """``default``: ``default``'s delivery state, whose figures PENDING shows."""

    def __init__(self, store: Store, default: DeliveryState, requeued: Requeued,
                 copy: Copy) -> None:
        self.store = store
        self.default = default
        self.requeued = requeued
        self.copy = copy

    def verbs(self) -> dict[bytes, Verb]:
        return {b"DEAD": self._dead, b"REQUEUE": self._move(b"REQUEUE", self._requeue),
                b"PURGE": self._move(b"PURGE", self._purge), b"PENDING": self._pending}

    def _dead(self, arguments: list[bytes], now: Now) -> bytes:
        if len(arguments) > 1 or (arguments and not is_whole_number(arguments[0])):
            # int()'s and islice()'s own words named neither DEAD nor what it takes
            return (f"ERROR: DEAD {shown_words(arguments)}: give DEAD [limit], a limit a "
                    "whole number 0 or more").encode()
        if not arguments:
            return self._list(DEFAULT_LIST)
        # a limit past what a list can hold lists them all (and no int() of a long frame)
        limit = whole_number(arguments[0])
        return self._list(sys.maxsize if limit is None else min(limit, sys.maxsize))

    def _move(self, verb: bytes, move: Callable[[list[int], Now], int]) -> Verb:
        def answer(arguments: list[bytes], now: Now) -> bytes:
            if len(arguments) != 1:
                return f"ERROR: {verb.decode()} needs one key, or ALL".encode()
            try:
                moved = move(self._select(arguments[0]), now)
            except (ValueError, DecodeError, StoreError) as exc:
                return f"ERROR: {exc}".encode()
            if not moved and arguments[0].upper() != b"ALL":  # one key asked for, and absent
                return f"ERROR: no dead letter {arguments[0].decode()}".encode()
            return f"{verb.decode().lower()}d: {moved}\n".encode()
        return answer

    def _list(self, limit: int) -> bytes:
        lines = [f"dead_letters: {self.store.dead_letters}"]
        for store_key, value in self.store.scan(keyspace.DEAD_PREFIX, limit=limit):
            seq = keyspace.SEQ.unpack_from(store_key, 1)[0]
            stored = record.decode(value)
            reason = self.store.get(keyspace.dead_reason_key(seq))
            lines.append(" ".join((message_key(self.store.node_id, seq).decode(),
                                   stored.msg_id.decode(errors="replace"),
                                   f"deliveries={stored.deliveries}",
                                   f"bytes={sum(len(part) for part in stored.parts)}",
                                   *([f"reason={reason.decode()}"] if reason else []))))
        return ("\n".join(lines) + "\n").encode()

    def _pending(self, arguments: list[bytes], now: Now) -> bytes:
        store, default = self.store, self.default
        figures = (("messages", store.messages), ("messages_inflight", len(default.inflight)),
                   ("messages_ready", len(default.ready)), ("dead_letters", store.dead_letters))
        return "".join(f"{key}: {value}\n" for key, value in figures).encode()

    def _select(self, argument: bytes) -> list[int]:
        if argument.upper() == b"ALL":
            found = self.store.scan(keyspace.DEAD_PREFIX, limit=MOST_PER_COMMAND)
            return [keyspace.SEQ.unpack_from(key, 1)[0] for key, _ in found]
        node_id, seq = parse_message_key(argument)
        if node_id != self.store.node_id:
            raise ValueError(f"{argument.decode()} is not a key of this node")
        return [seq]

    def _requeue(self, seqs: list[int], now: Now) -> int:
        batch = self.store.begin()
        moved = []
        for seq in seqs:
            value = self.store.get_dead(seq)
            if value is not None:
                batch.drop_dead_letter(seq)
                fresh = record.with_bookkeeping(value, 0, 0)
                new_seq = batch.add_message(fresh)
                self.requeued(batch, new_seq, fresh)
                moved.append((new_seq, fresh))
        self.store.commit(batch)
        self.copy(moved, now.mono)
        return len(moved)

    def _purge(self, seqs: list[int], now: Now) -> int:
        batch = self.store.begin()
        purged = 0
        for seq in seqs:
            if self.store.get_dead(seq) is not None:
                batch.drop_dead_letter(seq)
                purged += 1
        self.store.commit(batch)
        return purged
