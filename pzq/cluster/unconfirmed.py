"""Copies a peer has not confirmed: kept by their origin and sent again to that peer.

A copy's holder list names every peer it was sent to, and while the origin is down
the first live holder delivers it (pzq.cluster.takeover). A peer that never got its
copy (stopped, or cut off, as it went) and is back would be that holder with
nothing to deliver, while another peer holds the copy. So the origin keeps, per
wake's batch, the copies each chosen peer has not confirmed (REPLICATED), and sends
them again, with the same batch id and holder list, when that peer answers again;
while it stays unconfirmed, every ``resend_s`` once the peer has confirmed a later
batch (a link keeps the order: this one was lost), else every ``slow_resend_s`` (a
peer behind is not sent everything again each time). A holder keeps a copy once
(a second one is confirmed and dropped), so sending again is harmless.

A message done with (every group, or one group: a copy sent after the group's DONE
would lack its mark) is never sent again: ``forget`` drops it before its REMOVE or
DONE is owed, and both go on the same link after anything sent before them.

Kept in memory only, at most ``limit_bytes`` of message records (shared with the
batch that sent them, not copied); past that the oldest are given up (counted in
``given_up``, logged at most once a minute): those wait for their origin as before.
A restarted origin has none: its own disk delivers what it holds (see docs/cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

from pzq.bulk import each
from pzq.logs import get_logger

log = get_logger("pzq.cluster")

Encoder = Callable[[bytes, int, bytes, list[Any]], list[bytes]]  # REPLICATE or SCHEDULE
LIMIT_BYTES = 64 << 20
GIVEN_UP_SAID_EVERY_S = 60.0
SEQ_OF, RECORD_OF = itemgetter(0), itemgetter(-1)


@dataclass
class SentCopies:
    """One wake's batch of copies, and the peers that owe a confirmation of it."""

    encode: Encoder
    holders: bytes
    messages: list[Any]  # (seq, ...) as the encoder takes them
    size: int
    waiting: dict[str, int]  # endpoint -> the batch id it confirms with
    sent_at: dict[str, float]  # endpoint -> last send
    gone: set[int] = field(default_factory=set)  # seqs done with: not sent again


class UnconfirmedCopies:
    def __init__(self, node_id: bytes, resend_s: float, slow_resend_s: float,
                 limit_bytes: int = LIMIT_BYTES) -> None:
        self.node_id = node_id
        self.resend_s = resend_s
        self.slow_resend_s = slow_resend_s
        self._newest_confirmed: dict[str, int] = {}  # endpoint -> batch id
        self.limit_bytes = limit_bytes
        self.size = 0
        self.given_up = 0  # messages' copies dropped past the limit, unconfirmed
        self._given_up_said: float | None = None
        self._next_id = 0
        self._sent: dict[int, SentCopies] = {}  # oldest first
        self._by_batch: dict[int, int] = {}  # batch id -> entry
        self._by_seq: dict[int, int] = {}  # own seq -> entry

    def sent(self, encode: Encoder, holders: bytes, messages: list[Any],
             batch_ids: dict[str, int], now: float) -> None:
        """Copies just sent to each peer of ``batch_ids``, to keep until it confirms."""
        if not batch_ids or not messages:
            return
        entry_id = self._next_id
        self._next_id += 1
        size = sum(map(len, map(RECORD_OF, messages)))
        self._sent[entry_id] = SentCopies(encode, holders, messages, size, dict(batch_ids),
                                          dict.fromkeys(batch_ids, now))
        self._by_batch.update(zip(batch_ids.values(), repeat(entry_id)))
        self._by_seq.update(zip(map(SEQ_OF, messages), repeat(entry_id)))
        self.size += size
        if self.size > self.limit_bytes:
            self._give_up_oldest(now)

    def confirmed(self, endpoint: str, batch_id: int) -> None:
        if batch_id > self._newest_confirmed.get(endpoint, -1):
            self._newest_confirmed[endpoint] = batch_id
        entry_id = self._by_batch.get(batch_id)
        if entry_id is None:
            return
        entry = self._sent[entry_id]
        if entry.waiting.get(endpoint) != batch_id:
            return
        del entry.waiting[endpoint], self._by_batch[batch_id]
        if not entry.waiting:
            self._drop(entry_id)

    def forget(self, seqs: list[int]) -> None:
        """Own messages done with: never sent again."""
        if not self._by_seq:
            return
        for seq in seqs:
            entry_id = self._by_seq.pop(seq, None)
            if entry_id is None:
                continue
            entry = self._sent[entry_id]
            entry.gone.add(seq)
            if len(entry.gone) == len(entry.messages):
                self._drop(entry_id)

    def forget_sends(self, endpoint: str) -> None:
        """The peer answers again: what it has not confirmed goes out at once."""
        for entry in self._sent.values():
            entry.sent_at.pop(endpoint, None)

    def due(self, endpoint: str, now: float) -> list[list[bytes]]:
        """Frames of the copies ``endpoint`` has not confirmed, due again."""
        frames = []
        newest = self._newest_confirmed.get(endpoint, -1)
        for entry in self._sent.values():
            batch_id = entry.waiting.get(endpoint)
            if batch_id is None:
                continue
            last = entry.sent_at.get(endpoint)
            if last is not None and now - last < (self.resend_s if batch_id < newest
                                                  else self.slow_resend_s):
                continue
            entry.sent_at[endpoint] = now
            messages = ([message for message in entry.messages if message[0] not in entry.gone]
                        if entry.gone else entry.messages)
            frames.append(entry.encode(self.node_id, batch_id, entry.holders, messages))
        return frames

    def owed_to(self, endpoint: str) -> int:
        """Messages whose copies ``endpoint`` has not confirmed (kept to send again)."""
        return sum(len(entry.messages) - len(entry.gone) for entry in self._sent.values()
                   if endpoint in entry.waiting)

    def _give_up_oldest(self, now: float) -> None:
        given_up = 0
        while self.size > self.limit_bytes and self._sent:
            entry_id = next(iter(self._sent))
            entry = self._sent[entry_id]
            given_up += len(entry.messages) - len(entry.gone)
            self._drop(entry_id)
        self.given_up += given_up
        if self._given_up_said is None or now - self._given_up_said >= GIVEN_UP_SAID_EVERY_S:
            self._given_up_said = now
            log.warning("unconfirmed_copies_given_up", messages=given_up,
                        total=self.given_up, limit_bytes=self.limit_bytes)

    def _drop(self, entry_id: int) -> None:
        entry = self._sent.pop(entry_id)
        self.size -= entry.size
        for batch_id in entry.waiting.values():
            self._by_batch.pop(batch_id, None)
        each(self._by_seq.pop, map(SEQ_OF, entry.messages), repeat(None))  # own seqs: one entry
