"""The store's timed sync held up in its thread until the test lets it go: the real
fsyncs of pzq.store.log_files, run once ``release`` is called (for what the loop does
while a sync runs; a real slow fsync cannot be had on demand)."""

from __future__ import annotations

import threading
from pathlib import Path

from pzq.store.log_files import sync_log_files
from pzq.store.store import Store

HOLD_LIMIT_S = 20.0  # a test that never releases fails, rather than hanging the stop


class HeldSync:
    def __init__(self, store: Store) -> None:
        self.started = threading.Event()
        self._released = threading.Event()
        store.syncer.sync = self

    def __call__(self, directory: Path) -> None:
        self.started.set()
        if not self._released.wait(HOLD_LIMIT_S):
            raise AssertionError("the held sync was never released")
        sync_log_files(directory)

    def release(self) -> None:
        self._released.set()
