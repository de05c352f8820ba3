"""The store's timed sync beside the loop: one worker thread fsyncs LevelDB's logs
(pzq.store.log_files) while the loop serves on.

The fsyncs of a timed sync took 8-12 ms, and on the loop they held every ACK and
delivery of that wake; ``os.fdatasync`` releases the GIL, so in a thread of its own
the loop runs meanwhile. One sync at a time: the store starts one when it is due
and none runs, and takes its outcome at a later wake (nothing waits on it); what
it covers and what waits for the next one is pzq.store.log_sync's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pzq.store.log_files import sync_log_files


class LogSyncer:
    def __init__(self, sync: Callable[[Path], None] = sync_log_files) -> None:
        self.sync = sync  # what the thread runs (a test may hold it up)
        self._pool: ThreadPoolExecutor | None = None  # started with the first sync
        self._running: Future[None] | None = None

    @property
    def running(self) -> bool:
        """A sync was started and its outcome not yet taken."""
        return self._running is not None

    def prepare(self) -> None:
        """Start the thread now (at the store's opening): a thread started by the first
        sync held that wake until the new thread was scheduled, 1 to 10 ms on a busy
        machine."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="pzq-store-sync")
            self._pool.submit(_nothing).result()

    def start(self, directory: Path) -> None:
        self.prepare()
        assert self._pool is not None
        self._running = self._pool.submit(self.sync, directory)

    def finished(self) -> bool:
        """The running sync is done (its outcome waits to be taken)."""
        return self._running is not None and self._running.done()

    def outcome(self) -> OSError | None:
        """The running sync's outcome, waiting for it if it still runs: None when it
        synced, the OSError when it could not."""
        running, self._running = self._running, None
        if running is None:
            return None
        error = running.exception()
        if error is None or isinstance(error, OSError):
            return error
        raise error  # a bug, not the disk

    def close(self) -> None:
        """Waits for a running sync (its outcome is lost: take it first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._running = None


def _nothing() -> None:
    pass
