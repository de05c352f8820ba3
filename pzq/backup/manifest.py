"""A backup's manifest: what the copy holds, with a checksum per file, written last.

``<backup>/store/backup-manifest.json``, in the copy's store directory so that a node
started on the copy (``pzq --database <backup>/store --archive-dir <backup>/archive``)
finds it. A backup writes it first saying ``"complete": false`` and replaces it once
every file is copied and fsync'd, so a copy cut short (the node killed, the disk
full) is never taken for a whole one. The manifest names the node, the store's
format, the time of the snapshot, each archive topic with its durable end, and
every file (its bytes and sha256): the store's under ``store``, the archive's under
``archive``, each by its path in that directory.

A node that finds the manifest at start checks the copy before it opens anything
(``check_restore``): a copy that is incomplete, a file missing or changed, or a file
the manifest does not list (the copy put into a folder holding another store, whose
logs LevelDB would read into it), is refused with one line naming the file. A whole
copy is taken: the node opens its store, skips RESTORE_SEQ_GAP sequence numbers and
one per µs since the snapshot (``restore_skip``: message keys are unique across
restarts, and the original node, or an earlier restore of the same copy, gave out
some after the backup), and renames the manifest ``backup-manifest.restored.json``
(``restored``), since its own writes change the files from then on. That file keeps
``lost_seqs`` too: the sequence numbers the original may have given out after the
backup, which the copy lacks (from the copy's next one to the first after the gap,
with those of any earlier restore the backup's node had). A node in a cluster tells
its peers (pzq.cluster.core), which deliver what they hold of them (``lost_seqs``
reads them at each start).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pzq.backup.files import Digest, digest_of
from pzq.errors import StoreError
from pzq.fsync import sync_directory
from pzq.store.store_format import STORE_FORMAT

MANIFEST = "backup-manifest.json"
RESTORED = "backup-manifest.restored.json"
MANIFEST_FORMAT = 1  # pzq_backup: the layout of this file
# Files in the store's copy that LevelDB rewrites or leaves as it likes, not checked.
# 2**48: at a million messages a second, nine years of the original's keys after the
# backup; 65 536 restores fit in the 64-bit sequence numbers (restore_skip adds a seq
# per µs since the snapshot: a year, 2**45, an eighth of this gap).
RESTORE_SEQ_GAP = 1 << 48
UNCHECKED = frozenset({"LOCK", "LOG", "LOG.old", MANIFEST, RESTORED})


def write_manifest(store_copy: Path, content: dict[str, Any]) -> None:
    """Write it whole under a temporary name, fsync, and put it in place (fsync'd)."""
    path = store_copy / MANIFEST
    partial = path.with_name(MANIFEST + ".partial")
    with partial.open("w") as handle:
        json.dump({"pzq_backup": MANIFEST_FORMAT, **content}, handle, indent=1,
                  sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    partial.replace(path)
    sync_directory(store_copy)


def check_restore(database: Path, archive_dir: Path | None) -> dict[str, Any] | None:
    """The manifest of a backup the node is started on, once the copy is checked; None
    when ``database`` holds none. StoreError, naming the file, for a copy that is
    incomplete, missing a file or changed. The archive's files are checked when the
    node is given an archive directory."""
    path = database / MANIFEST
    if not path.is_file():
        return None
    content = _read(path)
    _refuse_newer_store(path, content)
    if content.get("complete") is not True:
        raise StoreError(f"{path} says the backup did not finish: the copy is partial "
                         "(the node was stopped or its disk was full during it); "
                         "restore another backup")
    _check_files(database, content["store"]["files"], path)
    _refuse_strays(database, content["store"]["files"], path)
    archive = content.get("archive")
    if archive is not None and archive_dir is not None:
        _check_files(archive_dir, archive["files"], path)
        _refuse_strays(archive_dir, archive["files"], path)
    return content


SeqRanges = list[tuple[int, int]]  # [first, end) pairs of sequence numbers


def restore_skip(backup: dict[str, Any], now_us: int) -> int:
    """How many seqs a node restored from ``backup`` skips: RESTORE_SEQ_GAP, and one
    more per µs since the snapshot. A copy of the same backup restored again later
    then starts after what an earlier restore of it gave out (at fewer than a seq a
    µs), and its lost_seqs cover those: else it would give them out again, and the
    peers would take its messages for copies they hold of the earlier one's."""
    taken = backup.get("taken_at_us")
    elapsed = now_us - taken if isinstance(taken, int) else 0
    return RESTORE_SEQ_GAP + max(0, elapsed)


def restored(database: Path, backup: dict[str, Any], lost: tuple[int, int]) -> SeqRanges:
    """The copy is the node's store now: its manifest is not checked again, and it
    keeps the seqs the copy lacks (``lost``, after those an earlier restore lost), for
    ``lost_seqs`` at each start. Returns them all."""
    ranges = _ranges(backup.get("lost_seqs", []), database / MANIFEST) + [lost]
    try:
        write_manifest(database, {**backup, "lost_seqs": ranges})
        (database / MANIFEST).replace(database / RESTORED)
        sync_directory(database)
    except OSError as exc:
        raise StoreError(f"cannot rename {database / MANIFEST}: {exc.strerror}") from None
    return ranges


def lost_seqs(database: Path) -> SeqRanges:
    """The seqs this node gave out once and lost in a restore (none: never restored,
    or restored by a release that did not keep them)."""
    path = database / RESTORED
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path} is unreadable ({type(exc).__name__}: {exc}): it names "
                         "the messages this node lost in its restore, which its peers "
                         "deliver; put back its lost_seqs, or remove the file (then the "
                         "peers hold those undelivered while this node is up)") from None
    return _ranges(content.get("lost_seqs", []) if isinstance(content, dict) else None, path)


def _ranges(found: object, path: Path) -> SeqRanges:
    if not isinstance(found, list) or not all(
            isinstance(pair, list | tuple) and len(pair) == 2
            and all(isinstance(seq, int) and seq >= 0 for seq in pair) for pair in found):
        raise StoreError(f"{path}: lost_seqs is not a list of [first, end] pairs of "
                         "sequence numbers")
    return [(first, end) for first, end in found]


def _read(path: Path) -> dict[str, Any]:
    """The manifest, whole or not (a backup cut short wrote one saying so), its layout
    checked: an entry short of a field was a traceback of the check that read it."""
    unreadable = f"{path} is not a backup manifest this pzq can read"
    damaged = ": it was changed or damaged since the backup; restore a whole copy"
    try:
        text = path.read_text()
    except OSError as exc:
        raise StoreError(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        content = json.loads(text)
        version, complete = content["pzq_backup"], content["complete"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"{unreadable} ({_why(exc)}){damaged}") from None
    if not isinstance(version, int):
        raise StoreError(f"{unreadable} (its pzq_backup is not a number){damaged}")
    if version > MANIFEST_FORMAT:
        raise StoreError(f"{path} is of a newer backup format ({version}) than this pzq "
                         f"reads ({MANIFEST_FORMAT}): restore it with the release that took "
                         f"it{_taken_by(content)}")
    if complete is True:
        try:
            _check_listing("store", content["store"])
            if content.get("archive") is not None:
                _check_listing("archive", content["archive"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"{unreadable} ({_why(exc)}){damaged}") from None
    return dict(content)


def _check_listing(area: str, section: object) -> None:
    """ValueError unless ``section`` lists files as the checks read them: name ->
    bytes (a whole number) and sha256 (text)."""
    files = section.get("files") if isinstance(section, dict) else None
    if not isinstance(files, dict):
        raise ValueError(f"its {area} has no list of files")
    for name, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("sha256"), str)):
            raise ValueError(f"its {area} file {name} has no bytes and sha256")


def _why(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"it has no {exc.args[0]!r}"
    if isinstance(exc, TypeError):
        return "it is not laid out as a backup manifest"
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return f"not JSON: {exc}"
    return str(exc)


def _taken_by(content: dict[str, Any]) -> str:
    release = content.get("release")
    return f" (pzq {release})" if isinstance(release, str) else ""


def _refuse_newer_store(path: Path, content: dict[str, Any]) -> None:
    """Before anything is opened: LevelDB's open rewrites the copy's files (its log into
    a table, a new MANIFEST) before the store's format can be read and refused, and the
    release that reads it then refused the copy as changed since the backup."""
    found = content.get("store_format")
    if isinstance(found, int) and found > STORE_FORMAT:
        raise StoreError(f"{path} is a backup of a store of format {found}, newer than this "
                         f"pzq reads (format {STORE_FORMAT}): restore it with a release that "
                         f"reads format {found}{_taken_by(content)}; the copy is untouched")


def _check_files(directory: Path, files: dict[str, dict[str, Any]], manifest: Path) -> None:
    for name, wanted in sorted(files.items()):
        path = directory / name
        if not path.is_file():
            raise StoreError(f"{path} is missing from the backup (its manifest {manifest} "
                             "lists it): restore a whole copy")
        found = digest_of(path)
        if found != Digest(wanted["bytes"], wanted["sha256"]):
            raise StoreError(f"{path} differs from the backup's manifest ({found.bytes} bytes, "
                             f"sha256 {found.sha256[:12]}..., not {wanted['bytes']} bytes, "
                             f"{wanted['sha256'][:12]}...): it was changed or damaged since "
                             "the backup; restore a whole copy")


def _refuse_strays(directory: Path, files: dict[str, dict[str, Any]], manifest: Path) -> None:
    """A file the backup does not hold is another store's or archive's: LevelDB would
    replay such a log into the copy (its counts and messages mixed in, found by
    restoring onto an old store's folder), and the archive would serve such segments."""
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        if path.is_dir() or name in files or name in UNCHECKED or name.endswith(".partial"):
            continue
        raise StoreError(f"{path} is not in the backup (its manifest {manifest} does not "
                         "list it): restore the copy into a new or empty directory, as a "
                         "file of another store there would be read with it")
