"""The writing half of a backup, on a thread of its own (see pzq.backup.job).

It touches no socket and nothing of the node: only the copy's directory, the store's
slices the loop hands it through a bounded queue, and the archive's files the loop
opened for it. In order:

    prepare   ``<dir>/store`` made, the manifest written there saying incomplete
    store     the slices into the copy's LevelDB (pzq.store.snapshot_copy)
    files     the copy's LevelDB files hashed and fsync'd
    archive   the archive's files into ``<dir>/archive``, hashed and fsync'd
    manifest  written last (pzq.backup.manifest), with ``<dir>`` fsync'd

A failure (a full disk) or a cancel (the node stopping, the snapshot unreadable)
removes what it wrote, and the directories it made for the copy (``<dir>`` and any
missing parent) once they are empty; ``error`` says why.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pzq.archive.tier.durable import DurableFile, close_all
from pzq.backup.files import Digest, FileCopy
from pzq.backup.manifest import UNCHECKED, write_manifest
from pzq.errors import PzqError
from pzq.fsync import make_directories, sync_directory
from pzq.logs import get_logger
from pzq.store.snapshot_copy import CopyWriter, Slice

log = get_logger("pzq.backup")

STORE, ARCHIVE = "store", "archive"  # the copy's two directories
WAIT_S = 0.1  # how often a writer waiting for a slice looks whether it is cancelled


class Cancelled(Exception):
    pass


@dataclass
class Progress:
    store_keys: int = 0
    store_bytes: int = 0
    archive_bytes: int = 0
    digests: dict[str, dict[str, Digest]] = field(
        default_factory=lambda: {STORE: {}, ARCHIVE: {}})


class BackupWriter(threading.Thread):
    def __init__(self, directory: Path, slices: queue.Queue[Slice],
                 archive_files: list[DurableFile], manifest: dict[str, Any]) -> None:
        """``slices``: the store's, an empty one last; ``manifest``: what is known of the
        backup at its beginning (the files and counts are added here)."""
        super().__init__(name="pzq-backup", daemon=True)
        self.directory = directory
        # the directories the copy makes, innermost first: removed again when it fails
        self.made = [place for place in (directory, *directory.parents) if not place.exists()]
        self.slices = slices
        self.archive_files = archive_files  # owned here from now on: closed here
        self.manifest = manifest
        self.phase = "prepare"
        self.progress = Progress()
        self.error = ""
        self.finished = threading.Event()
        self._cancelled = threading.Event()
        self._why = ""
        self._at = ""  # the file being copied, under the folder given, for an error's line

    def cancel(self, why: str) -> None:
        self._why = why
        self._cancelled.set()

    def run(self) -> None:
        try:
            self._write()
        except Cancelled:
            self.error = self._why
        except (PzqError, OSError) as exc:
            self.error = _reason(exc, self._at)
        except Exception as exc:  # a defect: said, and the copy still removed
            log.exception("backup_writer_failed")
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            close_all(self.archive_files)
            if self.error:
                self._remove_copy()
            self.finished.set()

    def _write(self) -> None:
        make_directories(self.directory / STORE)
        write_manifest(self.directory / STORE, {"complete": False,
                                                "backup": self.manifest["backup"],
                                                "started_at": self.manifest["taken_at"]})
        self.phase = STORE
        self._copy_store()
        self.phase = "files"
        for path in sorted((self.directory / STORE).iterdir()):
            if path.name not in UNCHECKED and not path.name.endswith(".partial"):
                self._copy(STORE, path.name, os.open(path, os.O_RDONLY), path.stat().st_size,
                           None)
        self.phase = ARCHIVE
        while self.archive_files:
            file = self.archive_files.pop(0)
            self._copy(ARCHIVE, file.name, file.fd, file.length,
                       self.directory / ARCHIVE / file.name)
        self.phase = "manifest"
        self._write_manifest()

    def _copy_store(self) -> None:
        copy = CopyWriter(self.directory / STORE)
        try:
            while True:
                items = self._next_slice()
                if not items:
                    return
                copy.write(items)
                self.progress.store_keys, self.progress.store_bytes = copy.keys, copy.bytes
        finally:
            copy.close()

    def _next_slice(self) -> Slice:
        while True:
            if self._cancelled.is_set():
                raise Cancelled
            try:
                return self.slices.get(timeout=WAIT_S)
            except queue.Empty:
                continue

    def _copy(self, area: str, name: str, source: int, length: int,
              target: Path | None) -> None:
        self._at = str(self.directory / area / name)  # as the store's copy names its files
        try:
            if target is not None:
                make_directories(target.parent)
            copy = FileCopy(source, length, target)
        except OSError:
            os.close(source)
            raise
        try:
            while True:
                if self._cancelled.is_set():
                    raise Cancelled
                before = copy.done
                digest = copy.step()
                if area == ARCHIVE:
                    self.progress.archive_bytes += copy.done - before
                if digest is not None:
                    self.progress.digests[area][name] = digest
                    return
        finally:
            copy.close()

    def _write_manifest(self) -> None:
        if self.manifest["archive"] is not None:  # the copied files' names, then the topics'
            make_directories(self.directory / ARCHIVE)
            for topic in self.manifest["archive"]["topics"]:
                if (self.directory / ARCHIVE / topic).is_dir():
                    sync_directory(self.directory / ARCHIVE / topic)
            sync_directory(self.directory / ARCHIVE)
            self.manifest["archive"]["files"] = _as_json(self.progress.digests[ARCHIVE])
        self.manifest["store"].update(keys=self.progress.store_keys,
                                      files=_as_json(self.progress.digests[STORE]))
        write_manifest(self.directory / STORE, self.manifest)
        sync_directory(self.directory)

    def _remove_copy(self) -> None:
        for area in (STORE, ARCHIVE):
            shutil.rmtree(self.directory / area, ignore_errors=True)
        left = [area for area in (STORE, ARCHIVE) if (self.directory / area).exists()]
        if left:
            self.error += f" ({', '.join(left)} could not be removed)"
            return
        kept = _remove_made(self.made)
        self.error += (" (what it wrote is removed)" if kept is None else
                       f" (what it wrote is removed; {kept})")


def _remove_made(made: list[Path]) -> str | None:
    """Remove the directories made for the copy, innermost first, while each is empty;
    what stays and why (another writer's files in it), or None."""
    for place in made:
        if not place.is_dir():
            continue  # never made: the failure came before
        try:
            place.rmdir()
        except OSError as exc:
            return f"{place}, which it made, stays: {exc.strerror or exc}"
    return None


def _as_json(digests: dict[str, Digest]) -> dict[str, dict[str, object]]:
    return {name: digest.as_json() for name, digest in sorted(digests.items())}


def _reason(exc: PzqError | OSError, at: str) -> str:
    """One line: a file's trouble names the file."""
    if isinstance(exc, OSError):
        where = exc.filename or at
        return f"{where}: {exc.strerror or exc}" if where else str(exc.strerror or exc)
    return str(exc)
