"""The seqs other nodes lost in a restore from a backup (RESTORED), as this node keeps
them: in its store beside its copies of them, read back at its start, so that a node
restarted after a restored origin stopped telling it still delivers its copies of
them while that origin is up (pzq.cluster.takeover). Ranges are dropped once no copy
in them is held here; a drop waits for the wake's next batch (liveness is looked at
between batches).
"""

from __future__ import annotations

from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.protocol.cluster import pack_ranges, unpack_ranges
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store

log = get_logger("pzq.cluster.takeover")

Ranges = list[tuple[int, int]]


class KeptLost:
    def __init__(self, store: Store) -> None:
        self.ranges: dict[bytes, Ranges] = {}  # origin -> the seqs its restore lost
        self._dropping: set[bytes] = set()  # dropped, the delete for the next batch
        self._in_batch: set[bytes] = set()  # their deletes in the batch being built
        self._keeping: set[bytes] = set()  # kept in the batch being built
        for store_key, value in store.iterate(keyspace.LOST_PREFIX):
            try:
                self.ranges[store_key[1:]] = unpack_ranges(value, "kept lost seqs")
            except DecodeError:
                pass  # unreadable: the origin, up, tells them again (not confirmed here)

    def keep(self, batch: Batch, origin: bytes, ranges: Ranges) -> None:
        """What the origin's restore lost, in ``batch`` (a later restore's ranges cover
        an earlier one's: they replace them)."""
        self.ranges[origin] = ranges
        self._keeping.add(origin)
        self._dropping.discard(origin)
        batch.put(keyspace.lost_key(origin), pack_ranges(ranges))

    def drop(self, origin: bytes, why: str) -> None:
        ranges = self.ranges.pop(origin, None)
        if ranges is not None:
            self._dropping.add(origin)
            log.info("restored_seqs_dropped", origin=origin.decode(), lost_seqs=ranges,
                     reason=why)

    def prepare(self, batch: Batch) -> None:
        for origin in self._dropping:
            batch.delete(keyspace.lost_key(origin))
        self._in_batch |= self._dropping
        self._dropping.clear()

    def written(self) -> None:
        self._in_batch.clear()
        self._keeping.clear()

    def failed(self) -> None:
        # Kept in memory only as they are on disk: the origin, unconfirmed, tells
        # them again (confirmations wait for the write)
        for origin in self._keeping:
            self.ranges.pop(origin, None)
        self._keeping.clear()
        # (not those kept again meanwhile: their put follows in a later batch)
        self._dropping |= {origin for origin in self._in_batch if origin not in self.ranges}
        self._in_batch.clear()
