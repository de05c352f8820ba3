"""One backup of a running node, a step per wake of its loop (see pzq.backup.part).

It begins in one wake, at the end of it: the archive is fsync'd and its files opened
up to that durable end (pzq.archive.durable), then the store's snapshot is taken
(pzq.store.snapshot_copy). So a message the snapshot no longer holds (acked, its
delete written) is in the copied archive: its record was appended before its
delete, and the fsync came after both. Then each step does one slice of a phase:

    prepare   ``<dir>/store`` made, the manifest written there saying incomplete
    store     the copy's LevelDB made, then the snapshot into it, a slice of keys
    files     the copy's LevelDB files hashed and fsync'd, a chunk
    archive   the archive's files into ``<dir>/archive``, a chunk, hashed and fsync'd
    manifest  written last (pzq.backup.manifest), with ``<dir>`` fsync'd

A step that fails (a full disk, a damaged store) ends the backup: what it wrote is
removed, and the error says why. The node goes on either way.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pzq.archive.durable import DurableFile, DurableTopic, close_all, durable_files
from pzq.archive.writer import Archive
from pzq.backup.files import Digest, FileCopy
from pzq.backup.manifest import UNCHECKED, write_manifest
from pzq.clock import Now
from pzq.errors import PzqError
from pzq.fsync import make_directories, sync_directory
from pzq.logs import get_logger
from pzq.store.snapshot_copy import StoreCopy
from pzq.store.store import Store

log = get_logger("pzq.backup")

RUNNING, DONE, FAILED = "running", "done", "failed"
STORE, ARCHIVE = "store", "archive"  # the copy's two directories, and phases
PREPARE = "prepare"


@dataclass(frozen=True)
class NodeFacts:
    """What the manifest says of the node the copy is of."""

    node_id: str
    release: str
    store_format: int
    cluster_protocol: int


@dataclass
class Pending:
    """A file still to copy or hash: its area, its name there, and how to open it."""

    area: str
    name: str
    source: int  # an open descriptor
    length: int
    copy_to: Path | None  # None: hash it where it is


@dataclass
class Progress:
    store_keys: int = 0
    store_bytes: int = 0
    archive_bytes: int = 0
    archive_total_bytes: int = 0
    digests: dict[str, dict[str, Digest]] = field(
        default_factory=lambda: {STORE: {}, ARCHIVE: {}})


def iso(wall_us: int) -> str:
    return datetime.fromtimestamp(wall_us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Backup:
    def __init__(self, backup_id: str, directory: Path, store: Store, archive: Archive | None,
                 facts: NodeFacts, now: Now) -> None:
        """Begin: the archive's durable files and the store's snapshot, now. PzqError
        or OSError when it cannot begin (nothing is left behind)."""
        self.id = backup_id
        self.directory = directory
        self.facts = facts
        self.state, self.phase, self.error = RUNNING, PREPARE, ""
        self.started_us, self.finished_us = now.wall_us, 0
        self.longest_step_s = 0.0  # measured by the part that runs the steps
        self.longest_step_phase = ""
        self.progress = Progress()
        self.stored = (store.messages, store.dead_letters)
        self._pending: list[Pending] = []
        self._current: tuple[Pending, FileCopy] | None = None
        self._store_copy: StoreCopy | None = None
        self._archive_files: list[DurableFile] = []
        self.topics: dict[str, DurableTopic] | None = None
        try:
            if archive is not None:
                self.topics, self._archive_files = durable_files(archive, now.wall_us / 1e6)
                self.progress.archive_total_bytes = sum(
                    file.length for file in self._archive_files)
            self._store_copy = StoreCopy(store, directory / STORE)
        except BaseException:
            self._remove_copy()
            raise

    # -- steps -------------------------------------------------------------------------

    def stepped(self, phase: str, seconds: float) -> None:
        """A step (or the beginning) took this long: the pause it added to its wake."""
        if seconds > self.longest_step_s:
            self.longest_step_s, self.longest_step_phase = seconds, phase

    def step(self, now: Now) -> None:
        """One slice of the phase at hand; a failure ends the backup (state ``failed``)."""
        try:
            if self.phase == PREPARE:
                self._prepare()
            elif self.phase == STORE:
                self._copy_store()
            elif self._current is not None or self._pending:
                self._copy_file()
            else:
                self._finish(now)
        except (PzqError, OSError) as exc:
            self._fail(_reason(exc, self._current), now)

    def _prepare(self) -> None:
        make_directories(self.directory / STORE)
        write_manifest(self.directory / STORE, {"complete": False, "backup": self.id,
                                                "started_at": iso(self.started_us)})
        self.phase = STORE

    def _copy_store(self) -> None:
        assert self._store_copy is not None
        done = self._store_copy.step()
        self.progress.store_keys = self._store_copy.keys
        self.progress.store_bytes = self._store_copy.bytes
        if done:
            self.phase = "files"
            self._pending = self._store_files() + self._archive_pending()

    def _store_files(self) -> list[Pending]:
        found = []
        for path in sorted((self.directory / STORE).iterdir()):
            if path.name not in UNCHECKED and not path.name.endswith(".partial"):
                found.append(Pending(STORE, path.name, os.open(path, os.O_RDONLY),
                                     path.stat().st_size, None))
        return found

    def _archive_pending(self) -> list[Pending]:
        pending = [Pending(ARCHIVE, file.name, file.fd, file.length,
                           self.directory / ARCHIVE / file.name)
                   for file in self._archive_files]
        self._archive_files = []  # the Pending own the descriptors now
        return pending

    def _copy_file(self) -> None:
        if self._current is None:
            pending = self._pending.pop(0)
            self.phase = "files" if pending.area == STORE else ARCHIVE
            if pending.copy_to is not None:
                make_directories(pending.copy_to.parent)
            try:
                self._current = (pending, FileCopy(pending.source, pending.length,
                                                   pending.copy_to))
            except OSError:
                self._pending.insert(0, pending)  # its descriptor is closed with the rest
                raise
        pending, copy = self._current
        before = copy.done
        digest = copy.step()
        if pending.area == ARCHIVE:
            self.progress.archive_bytes += copy.done - before
        if digest is not None:
            self.progress.digests[pending.area][pending.name] = digest
            self._current = None

    def _finish(self, now: Now) -> None:
        self.phase = "manifest"
        if self.topics is not None:  # the copied files' names, then the topics'
            make_directories(self.directory / ARCHIVE)
            for topic in self.topics:
                if (self.directory / ARCHIVE / topic).is_dir():
                    sync_directory(self.directory / ARCHIVE / topic)
            sync_directory(self.directory / ARCHIVE)
        write_manifest(self.directory / STORE, self.manifest())
        sync_directory(self.directory)
        self.state, self.finished_us = DONE, now.wall_us
        log.info("backup_done", backup=self.id, directory=str(self.directory),
                 seconds=self.seconds(now), store_keys=self.progress.store_keys,
                 archive_bytes=self.progress.archive_bytes,
                 longest_step_ms=round(self.longest_step_s * 1000, 3))

    def manifest(self) -> dict[str, Any]:
        files = self.progress.digests
        archive = None if self.topics is None else {
            "topics": {name: {"start_offset": topic.start_offset,
                              "durable_end": topic.durable_end, "raw": topic.raw}
                       for name, topic in self.topics.items()},
            "files": {name: digest.as_json() for name, digest in files[ARCHIVE].items()}}
        return {"complete": True, "backup": self.id, "node_id": self.facts.node_id,
                "release": self.facts.release, "store_format": self.facts.store_format,
                "cluster_protocol": self.facts.cluster_protocol,
                "taken_at": iso(self.started_us), "taken_at_us": self.started_us,
                "store": {"keys": self.progress.store_keys, "messages": self.stored[0],
                          "dead_letters": self.stored[1],
                          "files": {name: digest.as_json()
                                    for name, digest in files[STORE].items()}},
                "archive": archive}

    # -- failure and its clean-up --------------------------------------------------------

    def cancel(self, why: str, now: Now) -> None:
        """Give the backup up (the node is stopping): what it wrote is removed."""
        if self.state == RUNNING:
            self._fail(why, now)

    def _fail(self, reason: str, now: Now) -> None:
        self._remove_copy()
        left = [path.name for path in (self.directory / STORE, self.directory / ARCHIVE)
                if path.exists()]
        self.state, self.finished_us = FAILED, now.wall_us
        self.error = reason + (f" ({', '.join(left)} could not be removed)" if left
                               else " (what it wrote is removed)")
        log.error("backup_failed", backup=self.id, directory=str(self.directory),
                  error=self.error)

    def _remove_copy(self) -> None:
        if self._store_copy is not None:
            self._store_copy.close()
        if self._current is not None:
            self._current[1].close()
            self._current = None
        close_all([DurableFile(pending.name, pending.source, 0) for pending in self._pending])
        self._pending = []
        close_all(self._archive_files)
        self._archive_files = []
        for area in (STORE, ARCHIVE):
            shutil.rmtree(self.directory / area, ignore_errors=True)

    # -- figures -------------------------------------------------------------------------

    def seconds(self, now: Now) -> float:
        return round(((self.finished_us or now.wall_us) - self.started_us) / 1e6, 3)

    def status(self, now: Now) -> dict[str, object]:
        progress = self.progress
        return {"backup": self.id, "state": self.state, "directory": str(self.directory),
                "phase": self.phase, "started_at": iso(self.started_us),
                "archive": "off" if self.topics is None else "on",
                "seconds": self.seconds(now), "store_keys": progress.store_keys,
                "store_bytes": progress.store_bytes,
                "archive_bytes": progress.archive_bytes,
                "archive_total_bytes": progress.archive_total_bytes,
                "longest_step_ms": round(self.longest_step_s * 1000, 3),
                "longest_step_phase": self.longest_step_phase, "error": self.error}


def _reason(exc: PzqError | OSError, current: tuple[Pending, FileCopy] | None) -> str:
    """One line: a file's trouble names the file."""
    if isinstance(exc, OSError):
        where = exc.filename or (f"{current[0].area}/{current[0].name}" if current else "")
        return f"{where}: {exc.strerror or exc}" if where else str(exc.strerror or exc)
    return str(exc)
