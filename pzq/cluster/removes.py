"""Removes owed to peers: kept, persisted and sent again until each peer confirms.

When a message is acked, every other node that may hold a copy must drop it, or a
later takeover delivers it again. A REMOVE can be lost (a link that drops frames, a
peer that is down, this node restarting), so each one is written to the store in
the same batch as the ack that caused it, sent to every peer that owes a
confirmation, and sent again (to peers that are up) until that peer answers
REMOVED. Removes are idempotent on the receiving side.

A consumer group done with messages other groups still hold is owed the same way,
in DONE frames (answered NOTED) instead of REMOVE.

A group's done with messages of an origin outside this run's --nodes (a shard store
a run with fewer shards leaves unused, whose copies a survivor took over) is owed to
that origin too, named by its node id (``absent_peer``) until it is heard again: then
the name becomes its endpoint, and it gets the DONE as any returning origin does. Such
an entry holds no more than one seq per copy of that origin taken over here and
group; it stays, across restarts, until the origin returns and confirms.

One entry per (origin, group, wake): ``o <id:8>`` (a remove) or ``O <id:8>`` (a
group's done, the value led by ``len:1 group``) -> ``origin:8 count:2
(len:2 endpoint)* seqs``, rewritten as peers confirm and deleted when the last one
has. An absent origin's name takes an endpoint's place (a release before this one
drops it when it loads the entry, as for a peer no longer configured).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from pzq.errors import DecodeError
from pzq.protocol import cluster as cw
from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store

SHORT = struct.Struct(">H")
ABSENT = "node:"  # leads an absent origin's name in ``waiting`` (no endpoint does)


def absent_peer(node_id: bytes) -> str:
    """The name an origin outside --nodes is owed by until it is heard again."""
    return ABSENT + node_id.hex()


@dataclass
class OwedRemove:
    remove_id: int
    origin: bytes
    seqs: list[int]
    waiting: set[str]  # peers that have not confirmed yet
    group: str = ""  # a group done with the messages; "": every group (REMOVE)
    sent_at: dict[str, float] = field(default_factory=dict)  # endpoint -> last send

    @property
    def key(self) -> bytes:
        return (keyspace.owed_done_key(self.remove_id) if self.group
                else keyspace.owed_key(self.remove_id))

    def frames(self) -> list[bytes]:
        if self.group:
            return cw.encode_done(self.origin, self.remove_id, self.group, self.seqs)
        return cw.encode_remove(self.origin, self.remove_id, self.seqs)


def encode_entry(entry: OwedRemove) -> bytes:
    peers = sorted(entry.waiting)
    chunks = [entry.origin, SHORT.pack(len(peers))]
    for endpoint in peers:
        raw = endpoint.encode()
        chunks += [SHORT.pack(len(raw)), raw]
    chunks.append(cw.pack_seqs(entry.seqs))
    if entry.group:
        group = entry.group.encode()
        chunks.insert(0, bytes([len(group)]) + group)
    return b"".join(chunks)


def decode_entry(remove_id: int, value: bytes, done: bool = False) -> OwedRemove:
    group = ""
    if done:
        group, value = value[1:1 + value[0]].decode(), value[1 + value[0]:]
    origin, offset = value[:keyspace.NODE_ID_LENGTH], keyspace.NODE_ID_LENGTH
    (count,) = SHORT.unpack_from(value, offset)
    offset += SHORT.size
    waiting = set()
    for _ in range(count):
        (length,) = SHORT.unpack_from(value, offset)
        offset += SHORT.size
        waiting.add(value[offset:offset + length].decode())
        offset += length
    return OwedRemove(remove_id, origin, cw.unpack_seqs(value[offset:]), waiting, group)


class RemoveLedger(Participant):
    def __init__(self, store: Store, peers: tuple[str, ...], resend_s: float) -> None:
        self.store = store
        self.resend_s = resend_s
        self.entries: dict[int, OwedRemove] = {}
        self._next_id = 0
        self._changed: set[int] = set()  # entries to write (or delete) with the next batch
        self._unreadable: list[bytes] = []  # entries of a past run to drop
        self.absent: set[bytes] = set()  # node ids some entry waits for by name
        for prefix in (keyspace.OWED_PREFIX, keyspace.OWED_DONE_PREFIX):
            self._load(set(peers), prefix)

    def _load(self, peers: set[str], prefix: bytes) -> None:
        """Removes owed before a restart; peers no longer configured owe nothing, an
        absent origin named by its node id still does."""
        for key, value in self.store.iterate(prefix):
            remove_id = keyspace.SEQ.unpack_from(key, 1)[0]
            self._next_id = max(self._next_id, remove_id + 1)
            try:
                entry = decode_entry(remove_id, value, prefix == keyspace.OWED_DONE_PREFIX)
            except (DecodeError, struct.error, UnicodeDecodeError, IndexError):
                self._unreadable.append(key)
                continue
            entry.waiting = {peer for peer in entry.waiting
                             if peer in peers or peer.startswith(ABSENT)}
            if absent_peer(entry.origin) in entry.waiting:
                self.absent.add(entry.origin)
            self.entries[remove_id] = entry
            if not entry.waiting:
                self._changed.add(remove_id)

    def owe(self, batch: Batch, origin: bytes, seqs: list[int], peers: set[str],
            group: str = "") -> None:
        """Persist, in the batch that applies the acks, a remove (or, with ``group``,
        that group's done) every peer must confirm; ``peers`` may name an absent
        origin (``absent_peer``)."""
        if not seqs or not peers:
            return
        if absent_peer(origin) in peers:
            self.absent.add(origin)
        entry = OwedRemove(self._next_id, origin, list(seqs), set(peers), group)
        self._next_id += 1
        self.entries[entry.remove_id] = entry
        batch.put(entry.key, encode_entry(entry))

    def found(self, node_id: bytes, endpoint: str) -> None:
        """An absent origin is heard again at ``endpoint``: what it is owed goes there,
        at once (asked only for a node id in ``absent``)."""
        self.absent.discard(node_id)
        name = absent_peer(node_id)
        for entry in self.entries.values():
            if name in entry.waiting:
                entry.waiting.discard(name)
                entry.waiting.add(endpoint)
                entry.sent_at.pop(endpoint, None)
                self._changed.add(entry.remove_id)

    def confirmed(self, endpoint: str, remove_id: int) -> None:
        entry = self.entries.get(remove_id)
        if entry is not None and endpoint in entry.waiting:
            entry.waiting.discard(endpoint)
            self._changed.add(remove_id)

    def due(self, endpoint: str, now: float) -> list[list[bytes]]:
        """REMOVE frames for ``endpoint`` not sent within the resend interval."""
        frames = []
        for entry in self.entries.values():
            last = entry.sent_at.get(endpoint)
            if endpoint in entry.waiting and (last is None or now - last >= self.resend_s):
                entry.sent_at[endpoint] = now
                frames.append(entry.frames())
        return frames

    def forget_sends(self, endpoint: str) -> None:
        """The peer is back: what it missed goes out at once."""
        for entry in self.entries.values():
            entry.sent_at.pop(endpoint, None)

    def owed_to(self, endpoint: str) -> int:
        """Messages whose removes ``endpoint`` has not confirmed yet."""
        return sum(len(entry.seqs) for entry in self.entries.values()
                   if endpoint in entry.waiting)

    def unconfirmed(self, origin: bytes, endpoint: str) -> set[int]:
        """Messages of ``origin`` acked here whose removes ``endpoint`` has not confirmed."""
        return {seq for entry in self.entries.values()
                if entry.origin == origin and endpoint in entry.waiting for seq in entry.seqs}

    # -- batch participant ---------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        for key in self._unreadable:
            batch.delete(key)
        self._unreadable.clear()
        for remove_id in self._changed:
            entry = self.entries.get(remove_id)
            if entry is None:
                continue
            if not entry.waiting:
                batch.delete(entry.key)
                del self.entries[remove_id]
            else:
                batch.put(entry.key, encode_entry(entry))
        self._changed.clear()
