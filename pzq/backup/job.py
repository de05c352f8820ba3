"""One backup of a running node: the loop's half (see pzq.backup.part).

It begins in one wake, at the end of it: the archive is fsync'd and its files opened
up to that durable end (pzq.archive.tier.durable), then the store's snapshot is taken
(pzq.store.snapshot_copy). So a message the snapshot no longer holds (acked, its
delete written) is in the copied archive: its record was appended before its
delete, and the fsync came after both. From then on the loop does one thing a
wake: it reads a slice of the snapshot and hands it to the writer (pzq.backup.writer),
a thread that does every write of the backup, so no wait for the disk ever holds the
loop. The queue between them is bounded: while it is full the loop reads nothing.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq.archive.tier.archive import Archive
from pzq.archive.tier.durable import DurableFile, DurableTopic, close_all, durable_files
from pzq.backup.manifest import lost_seqs
from pzq.backup.writer import BackupWriter
from pzq.clock import Now, utc_time
from pzq.errors import StoreError
from pzq.logs import get_logger
from pzq.store.snapshot_copy import Slice, SnapshotSlices
from pzq.store.store import Store

log = get_logger("pzq.backup")

RUNNING, DONE, FAILED = "running", "done", "failed"
QUEUED_SLICES = 8  # slices read ahead of the writer (at most 4 MiB)
STOP_WAIT_S = 10.0  # a stopping node waits this long for its backup's writer to end


@dataclass(frozen=True)
class NodeFacts:
    """What the manifest says of the node the copy is of."""

    node_id: str
    release: str
    store_format: int
    cluster_protocol: int


def iso(wall_us: int) -> str:
    return utc_time(wall_us).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Backup:
    def __init__(self, backup_id: str, directory: Path, store: Store, archive: Archive | None,
                 facts: NodeFacts, now: Now) -> None:
        """Begin: the archive's durable files and the store's snapshot, now, and the
        writer started. PzqError or OSError when it cannot begin (nothing is left)."""
        self.id = backup_id
        self.directory = directory
        self.state, self.error = RUNNING, ""
        self.started_us, self.finished_us = now.wall_us, 0
        # The longest step (measured by the part): its wall time and what it was, and
        # the most CPU time a step took on the loop's thread.
        self.longest_step_s, self.longest_step_phase, self.most_step_cpu_s = 0.0, "", 0.0
        self.steps, self.steps_cpu_s = 0, 0.0
        topics: dict[str, DurableTopic] | None = None
        files: list[DurableFile] = []
        if archive is not None:
            topics, files = durable_files(archive, now.wall_us / 1e6)
        self.archive_total_bytes = sum(file.length for file in files)
        try:
            self._slices = SnapshotSlices(store)
        except BaseException:
            close_all(files)
            raise
        self._queue: queue.Queue[Slice] = queue.Queue(QUEUED_SLICES)
        self.writer = BackupWriter(directory, self._queue, files,
                                   _manifest(self, facts, store, topics))
        self.writer.start()

    def stepped(self, phase: str, seconds: float, cpu_seconds: float) -> None:
        """A step (or the beginning) took this long, and this much of the loop thread's
        CPU: the pause it added to its wake."""
        if seconds > self.longest_step_s:
            self.longest_step_s, self.longest_step_phase = seconds, phase
        self.most_step_cpu_s = max(self.most_step_cpu_s, cpu_seconds)
        self.steps += 1
        self.steps_cpu_s += cpu_seconds

    @property
    def phase(self) -> str:
        return self.writer.phase

    def wants_step(self) -> bool:
        """A slice to read and room for it: the loop should not wait in its poll."""
        return (self.state == RUNNING and self._slices.open and not self._queue.full()
                and not self.writer.finished.is_set())

    def step(self, now: Now) -> None:
        """Hand the writer a slice if it has room; take the end once it has ended."""
        if self.writer.finished.is_set():
            self._ended(now)
        elif self.wants_step():
            try:
                self._queue.put_nowait(self._slices.next_slice())  # empty: the end
            except StoreError as exc:
                self._slices.close()
                self.writer.cancel(str(exc))

    def cancel(self, why: str, now: Now) -> None:
        """Give the backup up (the node is stopping): what it wrote is removed."""
        if self.state != RUNNING:
            return
        self.writer.cancel(why)
        self.writer.finished.wait(STOP_WAIT_S)
        self._ended(now)

    def _ended(self, now: Now) -> None:
        self._slices.close()
        self.finished_us = now.wall_us
        if self.writer.error:
            self.state, self.error = FAILED, self.writer.error
            log.error("backup_failed", backup=self.id, directory=str(self.directory),
                      error=self.error)
            return
        self.state = DONE
        progress = self.writer.progress
        log.info("backup_done", backup=self.id, directory=str(self.directory),
                 seconds=self.seconds(now), store_keys=progress.store_keys,
                 archive_bytes=progress.archive_bytes,
                 longest_step_ms=round(self.longest_step_s * 1000, 3))

    def seconds(self, now: Now) -> float:
        return round(((self.finished_us or now.wall_us) - self.started_us) / 1e6, 3)

    def status(self, now: Now) -> dict[str, object]:
        progress = self.writer.progress
        return {"backup": self.id, "state": self.state, "directory": str(self.directory),
                "phase": self.phase, "started_at": iso(self.started_us),
                "archive": "off" if self.writer.manifest["archive"] is None else "on",
                "seconds": self.seconds(now), "store_keys": progress.store_keys,
                "store_bytes": progress.store_bytes,
                "archive_bytes": progress.archive_bytes,
                "archive_total_bytes": self.archive_total_bytes,
                "longest_step_ms": round(self.longest_step_s * 1000, 3),
                "longest_step_phase": self.longest_step_phase,
                "most_step_cpu_ms": round(self.most_step_cpu_s * 1000, 3), "steps": self.steps,
                "mean_step_cpu_ms": round(self.steps_cpu_s / max(1, self.steps) * 1000, 3),
                "error": self.error}


def _manifest(backup: Backup, facts: NodeFacts, store: Store,
              topics: dict[str, DurableTopic] | None) -> dict[str, Any]:
    """What the manifest says from the beginning (the writer adds the files)."""
    archive = None if topics is None else {
        "topics": {name: {"start_offset": topic.start_offset,
                          "durable_end": topic.durable_end, "raw": topic.raw}
                   for name, topic in topics.items()}}
    return {"complete": True, "backup": backup.id, "node_id": facts.node_id,
            "release": facts.release, "store_format": facts.store_format,
            "cluster_protocol": facts.cluster_protocol,
            "taken_at": iso(backup.started_us), "taken_at_us": backup.started_us,
            "store": {"messages": store.messages, "dead_letters": store.dead_letters},
            "archive": archive,
            # a restore of this copy loses these too (pzq.backup.manifest.restored)
            "lost_seqs": lost_seqs(store.path)}
