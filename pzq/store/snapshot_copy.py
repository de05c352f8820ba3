"""The store as of one moment, copied into a new LevelDB (a backup).

Two halves, for two threads. ``SnapshotSlices`` is read by the loop that owns the
store: it takes a LevelDB snapshot when it is made, so the batches the node writes
meanwhile are not in it, and hands it out a slice at a time (at most SLICE_KEYS keys
or SLICE_BYTES bytes), each read with its checksum checked (a damaged store fails
the copy instead of copying the damage). The loop stays the only thread that
touches the store: it may close and reopen its LevelDB (pzq.store.store, after a
failed write), which a snapshot read elsewhere would not survive. ``CopyWriter``
writes the slices into the new LevelDB on another thread, so that the copy's disk
(its writes, its compactions, their stalls) never holds the loop.
"""

from __future__ import annotations

import time
from pathlib import Path

import plyvel

from pzq.errors import StoreError
from pzq.store.leveldb import WRITE_BUFFER, leveldb_reason
from pzq.store.store import Store

SLICE_KEYS = 1024
SLICE_BYTES = 1 << 19
YIELD_EVERY = 256  # puts between two chances for the loop's thread to take the GIL

Slice = list[tuple[bytes, bytes]]


class SnapshotSlices:
    """``store`` as of now, a slice per call, in key order."""

    def __init__(self, store: Store) -> None:
        self._snapshot = store.snapshot()
        self._items = self._snapshot.iterator(fill_cache=False, verify_checksums=True)
        self.keys = 0
        self.open = True  # until every key was handed out, or the copy was given up

    def next_slice(self) -> Slice:
        """The next keys and values; empty once every key was handed out (the snapshot is
        then let go). StoreError when a read fails (damage, or the store was closed)."""
        found: Slice = []
        size = 0
        try:
            for key, value in self._items:
                found.append((key, value))
                size += len(key) + len(value)
                if len(found) >= SLICE_KEYS or size >= SLICE_BYTES:
                    break
        except (plyvel.Error, RuntimeError) as exc:  # RuntimeError: the store was closed
            raise StoreError(f"cannot read the store's snapshot: {leveldb_reason(exc)}") \
                from None
        self.keys += len(found)
        if not found:
            self.close()
        return found

    def close(self) -> None:
        """Let the snapshot go (LevelDB keeps what it holds until then)."""
        if self.open:
            self.open = False
            self._items.close()
            self._snapshot.close()


class CopyWriter:
    """A new LevelDB at ``target`` (which must hold none), written a slice at a time."""

    def __init__(self, target: Path) -> None:
        try:
            self._db = plyvel.DB(str(target), create_if_missing=True, error_if_exists=True,
                                 write_buffer_size=WRITE_BUFFER)
        except plyvel.Error as exc:
            raise StoreError(f"cannot make the store's copy in {target}: "
                             f"{leveldb_reason(exc)}") from None
        self.keys = 0
        self.bytes = 0

    def write(self, items: Slice) -> None:
        """StoreError when the write fails (a full disk)."""
        try:
            with self._db.write_batch() as batch:
                for index, (key, value) in enumerate(items, 1):
                    batch.put(key, value)
                    if index % YIELD_EVERY == 0:
                        # Let the loop's thread run now rather than at the interpreter's
                        # next switch (5 ms): the puts hold the GIL, the write does not.
                        time.sleep(0)
        except plyvel.Error as exc:
            raise StoreError(f"cannot write the store's copy: {leveldb_reason(exc)}") from None
        self.keys += len(items)
        self.bytes += sum(len(key) + len(value) for key, value in items)

    def close(self) -> None:
        """Close it (its files are fsync'd by whoever reads them next: the backup)."""
        if not self._db.closed:
            self._db.close()
