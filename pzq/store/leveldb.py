"""LevelDB as the store opens it: its options, the directory fsync after an open, the
file that stands where the database should be, LevelDB's reasons as text, the store's
format settled, and a read of every block at the start; the store's database opened
with its errors told as StoreError."""

from __future__ import annotations

import os
from pathlib import Path

import plyvel

from pzq.errors import StoreError
from pzq.fsync import make_directories, sync_directory
from pzq.logs import get_logger
from pzq.store import keyspace
from pzq.store.store_format import (
    STORE_FORMAT,
    encode_format,
    format_of,
    refuse_newer,
    upgrade,
)

# A larger memtable than LevelDB's 4 MiB means fewer level-0 files, so fewer
# compactions and write stalls while a large backlog builds up.
WRITE_BUFFER = 32 * 1024 * 1024

log = get_logger("pzq.store")


# The original pzq's --database was a Kyoto Cabinet file (/tmp/sink.kch by default):
# carried over, it is a file where pzq wants a directory, and one it cannot read.
KYOTO_CABINET = ("--database {path} is a Kyoto Cabinet file, the original pzq's store, "
                 "which pzq cannot read: give a directory for pzq's own store, and let the "
                 "original node's consumers take its messages before it stops")


def is_kyoto_cabinet(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(3) == b"KC\n"  # the magic data of its hash and tree files
    except OSError:
        return False


def refuse_files_in_the_way(path: Path) -> None:
    """Say which file stands where the database directory (or one above it) should be."""
    for place in (path, *path.parents):
        if place.exists():
            if place == path and not place.is_dir():
                if is_kyoto_cabinet(path):
                    raise StoreError(KYOTO_CABINET.format(path=path))
                raise StoreError(f"--database {path} is a file, not a directory")
            if not place.is_dir():
                raise StoreError(f"cannot create database directory {path}: {place} is a file")
            return


def leveldb_reason(exc: Exception) -> str:
    """plyvel carries LevelDB's status text as bytes: say it as text, not as a repr."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


# LevelDB's answer to a read past the end of a table it maps into memory: the file is
# shorter than its MANIFEST records (truncated on disk), damage as a bad checksum is,
# which said as an IO error alone named no repair.
CUT_SHORT = ".ldb: Invalid argument"

REPAIR_HINT = ("with the node stopped, pzq-ctl repair --database {path} brings back "
                "what is intact")


def open_leveldb(path: Path) -> plyvel.DB:
    """Open, then fsync the directory: an open writes a new MANIFEST and points CURRENT
    at it by a rename that LevelDB leaves to a later directory fsync, and the
    LevelDB plyvel ships (1.22) does not fsync a new database's first MANIFEST at
    all, so a power cut before that fsync left a database that did not open."""
    db = plyvel.DB(str(path), create_if_missing=True, write_buffer_size=WRITE_BUFFER,
                   paranoid_checks=True)
    try:
        sync_directory(path)
    except OSError as exc:
        db.close()
        raise StoreError(f"cannot fsync database directory {path}: {exc.strerror}") from None
    return db


def settle_format(db: plyvel.DB, path: Path) -> None:
    """Refuse a store of a format this release cannot read (closed, untouched); write
    the version into a store that has none (see pzq.store.store_format)."""
    found = db.get(keyspace.META_FORMAT)
    try:
        refuse_newer(path, format_of(found))
    except ValueError as exc:
        db.close()
        raise StoreError(f"the store {path} is not one this pzq can read: {exc}") from None
    except StoreError:
        db.close()
        raise
    if found is None:
        if db.get(keyspace.META_NODE_ID) is not None:  # a store of a release before versions
            log.info("store_format_recorded", database=str(path), format=STORE_FORMAT)
        upgrade(db, format_of(found))  # (a store made before versions: its marks)
        db.put(keyspace.META_FORMAT, encode_format(), sync=True)
    elif format_of(found) < STORE_FORMAT:  # see store_format
        log.info("store_format_upgraded", database=str(path), found=format_of(found),
                 format=STORE_FORMAT)
        upgrade(db, format_of(found))
        db.put(keyspace.META_FORMAT, encode_format(), sync=True)


def read_everything(db: plyvel.DB) -> None:
    """Read every block once with its checksum checked, so damage is met at start (one
    clear error naming the repair) and not by a delivery hours later. It costs about
    a second per million stored messages."""
    with db.iterator(verify_checksums=True, fill_cache=False) as iterator:
        for _ in iterator:
            pass


def open_store_database(path: Path) -> plyvel.DB:
    """The store's LevelDB opened, its format settled and every block read once, or a
    StoreError that says why not (in use, damaged, not writable)."""
    refuse_files_in_the_way(path)
    try:
        make_directories(path)
    except OSError as exc:
        raise StoreError(f"cannot create database directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StoreError(f"database directory {path} is not writable")
    try:
        db = open_leveldb(path)
        settle_format(db, path)
        read_everything(db)
    except plyvel.IOError as exc:
        if "lock" in str(exc).lower() and "permission denied" not in str(exc).lower():
            raise StoreError(f"database directory {path} is in use by another "
                             "process (its LevelDB lock is held)") from None
        reason = leveldb_reason(exc)
        if reason.endswith(CUT_SHORT):
            raise StoreError(f"cannot open database {path}: a table is shorter than its "
                             f"MANIFEST records, cut short ({reason}); "
                             f"{REPAIR_HINT.format(path=path)}") from None
        raise StoreError(f"cannot open database {path}: {reason}") from None
    except plyvel.CorruptionError as exc:
        raise StoreError(f"cannot open database {path}: {leveldb_reason(exc)}; "
                         f"{REPAIR_HINT.format(path=path)}") from None
    except plyvel.Error as exc:
        raise StoreError(f"cannot open database {path}: {leveldb_reason(exc)}") from None
    return db
