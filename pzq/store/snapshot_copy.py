"""The store as of one moment, copied into a new LevelDB a slice at a time (a backup).

The copy reads a LevelDB snapshot taken when it is made, so the batches the node
writes meanwhile are not in it. Its first step makes the new LevelDB (which fsyncs
its first files); each step after copies a slice: at most SLICE_KEYS keys or
SLICE_BYTES bytes, written to the copy in one batch with an fsync, so that no later
step has more than a slice to wait for the disk. The loop that owns the store calls
``step`` once a wake, so a backup never holds the loop for longer than one step (see
docs/operations.rst, "Backup and restore", for the measured pause). Every value is
read with its checksum checked: a damaged store fails the copy instead of copying
the damage.
"""

from __future__ import annotations

from pathlib import Path

import plyvel

from pzq.errors import StoreError
from pzq.store.store import WRITE_BUFFER, Store, leveldb_reason

SLICE_KEYS = 2048
SLICE_BYTES = 1 << 20


class StoreCopy:
    """``store`` as of now into a new LevelDB at ``target`` (which must hold none)."""

    def __init__(self, store: Store, target: Path) -> None:
        self.target = target
        self.keys = 0
        self.bytes = 0
        self.done = False
        self._snapshot = store.snapshot()
        self._items = self._snapshot.iterator(fill_cache=False, verify_checksums=True)
        self._copy: plyvel.DB | None = None

    def step(self) -> bool:
        """Make the copy's database, or copy one slice; True once every key is copied
        and the copy closed. StoreError when that fails (a damaged store, a full disk)."""
        if self._copy is None:
            try:
                self._copy = plyvel.DB(str(self.target), create_if_missing=True,
                                       error_if_exists=True, write_buffer_size=WRITE_BUFFER)
            except plyvel.Error as exc:
                raise StoreError(f"cannot make the store's copy in {self.target}: "
                                 f"{leveldb_reason(exc)}") from None
            return False
        try:
            batch = self._copy.write_batch(sync=True)
            keys = size = 0
            finished = True
            for key, value in self._items:
                batch.put(key, value)
                keys += 1
                size += len(key) + len(value)
                if keys >= SLICE_KEYS or size >= SLICE_BYTES:
                    finished = False
                    break
            batch.write()
        except (plyvel.Error, RuntimeError) as exc:  # RuntimeError: the store was closed
            raise StoreError(f"cannot copy the store: {leveldb_reason(exc)}") from None
        self.keys += keys
        self.bytes += size
        if finished:
            self.close()
            self.done = True
        return finished

    def close(self) -> None:
        """Let the snapshot go and close the copy (also when it is given up)."""
        self._items.close()
        self._snapshot.close()
        if self._copy is not None and not self._copy.closed:
            self._copy.close()
