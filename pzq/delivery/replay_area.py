"""A replay's store area: archived messages read back for one named group, which only
that group's delivery reads (pzq.replay). Its keys name the replay in the node id's
place (``<replay id>-<seq>``), so its deliveries, ACKs and NACKs find their state as a
taken-over node's do.

An ACK deletes the message from the area and nothing else: it is in the archive
already, so it is not archived again, and no peer holds a copy of it. A message the
group gives up goes to the node's dead letters, as a taken-over one does.

The replay's record (``ReplayRecord``) is kept in the store beside its messages and
rewritten in the same batch as whatever changes it: the reader's position with the
messages it read, how far the first deliveries went with the state's cursor.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from pzq.delivery.areas import Chunk, delete_each
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store

# A replay's states: its reader goes on; it read the whole range; the group is done
READING, READ, DONE = "reading", "read", "done"


@dataclass
class ReplayRecord:
    """What a replay is and how far it went. ``position``: the archive offset its reader
    goes on from; ``end``: the offset it stops at (the archive's end when it began, or
    ``to=``); ``from_us``/``to_us``: the store times (µs since the epoch) a record's
    message must lie within (0: any); ``written``: messages read into the area (their
    seqs are 0 to written - 1); ``delivered``: how far the first deliveries went;
    ``dead``: messages the group gave up; ``expected``: how many the range holds, or an
    estimate (``estimated``)."""

    id: str
    topic: str
    group: str
    start: int  # where the range begins (an archive offset)
    end: int
    position: int
    from_us: int = 0
    to_us: int = 0
    written: int = 0
    delivered: int = 0
    dead: int = 0
    expected: int = 0
    estimated: bool = False
    state: str = READING
    created_us: int = 0
    asked: dict[str, str] = field(default_factory=dict)  # the from= and to= given

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> ReplayRecord:
        return cls(**json.loads(value))

    def save(self, batch: Batch) -> None:
        batch.put(keyspace.replay_record_key(self.id.encode()), self.encode())


class ReplayArea:
    """The messages of one replay in the store, as a DeliveryState reads them."""

    def __init__(self, store: Store, record: ReplayRecord) -> None:
        self.store = store
        self.record = record
        self.node_id = record.id.encode()
        self.prefix = keyspace.replay_prefix(self.node_id)
        # seqs still in the area: what the group has not finished (bounded by the
        # reader's look-ahead, pzq.replay.reader.AHEAD)
        self.present: set[int] = {keyspace.seq_at_end(key) for key, _ in
                                  store.iterate(self.prefix)}

    @property
    def left(self) -> int:
        """Messages read in and not yet finished by the group."""
        return len(self.present)

    @property
    def acked(self) -> int:
        return max(0, self.record.written - self.left - self.record.dead)

    def end_seq(self) -> int:
        return self.record.written

    def read(self, start_seq: int, limit: int) -> Chunk:
        found = [(keyspace.seq_at_end(key), value) for key, value in self.store.scan(
            self.prefix, keyspace.replay_key(self.node_id, start_seq), limit)]
        if len(found) < limit:
            return Chunk.of_pairs(found, max(start_seq, self.end_seq()))
        return Chunk.of_pairs(found, found[-1][0] + 1)

    def get(self, seq: int) -> bytes | None:
        return self.store.get(keyspace.replay_key(self.node_id, seq))

    def delivered_below(self) -> int:
        return self.record.delivered

    def keep_delivered_below(self, batch: Batch, seq: int) -> None:
        self.record.delivered = seq
        self.record.save(batch)

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        batch.delete(keyspace.replay_key(self.node_id, seq))
        self.present.discard(seq)

    def delete_all(self, batch: Batch, seqs: list[int], sizes: list[int],
                   ascending: bool = False) -> list[bool]:
        return delete_each(self, batch, seqs, sizes)

    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None:
        """The delivery count of a message delivered again, kept across a restart."""
        if seq in self.present:
            batch.put(keyspace.replay_key(self.node_id, seq), value)

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        """Given up by the group: to the node's dead letters (never archived again)."""
        if seq in self.present:
            batch.add_dead_letter(value)
            self.record.dead += 1
            self.record.save(batch)
        self.delete(batch, seq, len(value))

    def group_names(self, seq: int) -> tuple[str, ...]:
        return ()

    def group_names_all(self, seqs: list[int]) -> list[tuple[str, ...]]:
        return [()] * len(seqs)

    def would_release(self, seq: int) -> bool:
        """Never: an ACK of a replayed message only deletes it here (it is archived
        already, and no peer holds it)."""
        return False

    def would_release_all(self, seqs: list[int]) -> list[bool]:
        return [False] * len(seqs)

    def holds(self, seq: int, value: bytes) -> bool:
        """Every message in the area is the replayed group's until it is done with it."""
        return True
