"""When the store's LevelDB log must reach the disk: the bound on what a power cut loses.

Under --hard-sync every batch is fsync'd before its ACKs. Otherwise a batch is
written to the page cache (it survives a crash of the process, not a power cut)
and the log is fsync'd once --sync-interval has passed since the oldest write
that is not yet synced, so a power cut loses at most about that much; an
interval of 0 never syncs by time. Pure bookkeeping with the time passed in
(monotonic seconds): the loop decides when to look.

A timed sync runs beside the loop (pzq.store.store), one at a time: it covers the
writes made before it ``began``, and those made while it runs wait for the next
one, due an interval after the oldest of them. So a power cut loses at most
about the interval plus one sync's time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pzq.hooks import nothing

# While a sync runs, how often an idle loop wakes to see whether it finished (a busy
# one sees it at its next wake; nothing waits on it meanwhile).
RUNNING_POLL_S = 0.01


class LogSync:
    def __init__(self, hard: bool, interval_s: float, now: float) -> None:
        self.hard = hard
        self.interval_s = interval_s
        self.synced_at = now  # opening LevelDB leaves everything before it on disk
        self.unsynced_since: float | None = None  # the oldest write not yet synced
        self._retry_at = 0.0  # after a failed write, not before this
        self.running_since: float | None = None  # a timed sync began then and runs
        self._written_while_running: float | None = None  # the oldest write since
        # when the next write must be synced (monotonic seconds; inf: no sync waits),
        # kept as they change, so a wake asks ``due`` with no call
        self.due_at = 0.0 if hard else math.inf
        # told when a sync becomes owed (the loop's agenda: pzq.agenda); the wait only
        # grows otherwise
        self.on_sooner: Callable[[], None] = nothing

    def due(self, now: float) -> bool:
        """The next write must be synced."""
        return self.due_at <= now

    def _due(self) -> float:
        if self.hard:
            return 0.0
        if self.running_since is not None:
            return -math.inf  # every wake looks whether it finished
        if self.unsynced_since is None or self.interval_s <= 0:  # (``wait_s`` None)
            return math.inf
        return max(self.unsynced_since + self.interval_s, self._retry_at)

    def written(self, synced: bool, now: float) -> None:
        if synced:
            self.synced_at = now
            self.unsynced_since = self._written_while_running = None
            self.due_at = self._due()
            return
        if self.running_since is not None and self._written_while_running is None:
            self._written_while_running = now  # not covered by the running sync
        if self.unsynced_since is None:
            self.unsynced_since = now
            self.due_at = self._due()
            self.on_sooner()

    def began(self, now: float) -> None:
        """A timed sync began: it covers every write made before ``now``."""
        self.running_since = now
        self._written_while_running = None
        self.due_at = self._due()
        self.on_sooner()  # (the wait: the running sync's poll)

    def finished(self, synced: bool, now: float) -> None:
        """The running sync finished (``synced``) or failed (tried again an interval
        later); ``now``: when the loop saw it."""
        began, self.running_since = self.running_since, None
        if synced and began is not None:
            self.synced_at = max(self.synced_at, began)
            self.unsynced_since = self._written_while_running  # the next sync's
        self._written_while_running = None
        if synced:
            self.due_at = self._due()
        else:
            self.failed(now)

    def failed(self, now: float) -> None:
        """A write failed: try the sync again an interval later, not on every wake."""
        self._retry_at = now + self.interval_s
        self.due_at = self._due()

    def wait_s(self, now: float) -> float | None:
        """Seconds until a sync is due (while one runs: until the loop looks whether it
        finished); None while nothing waits for one."""
        if self.running_since is not None:
            return RUNNING_POLL_S
        if self.hard or self.unsynced_since is None or self.interval_s <= 0:
            return None
        return max(0.0, self.unsynced_since + self.interval_s - now, self._retry_at - now)

    def unsynced_s(self, now: float) -> float:
        """Age of the oldest write a power cut would lose now (0: none)."""
        return 0.0 if self.unsynced_since is None else max(0.0, now - self.unsynced_since)

    def sync_age_s(self, now: float) -> float:
        """Seconds since the log was last known to be on disk."""
        return max(0.0, now - self.synced_at)
