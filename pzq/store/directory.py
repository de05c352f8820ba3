"""A --database directory that holds something else is not taken for a store.

LevelDB creates its files in any directory it is given, so a typo naming a folder
of documents would scatter a store among them. A directory is taken when it is new,
empty, a store (it has LevelDB's CURRENT), or holds only files LevelDB names itself
(a store that was being created when its node stopped), besides the lost+found of
a file system mounted there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pzq.errors import StoreError

LEVELDB_NAME = re.compile(r"^(CURRENT|LOCK|LOG|LOG\.old|MANIFEST-\d+|\d+\.(log|ldb|sst|dbtmp)"
                          r"|lost|lost\+found)$")  # lost+found: a fresh file system mounted there
SHOWN = 3  # names given in the error, enough to recognise the folder


def refuse_other_content(path: Path) -> None:
    """StoreError when ``path`` is a directory with content and no store in it."""
    if not path.is_dir() or (path / "CURRENT").exists():
        return
    others = sorted(entry.name for entry in path.iterdir()
                    if not LEVELDB_NAME.match(entry.name))
    if others and _is_a_backup(path):
        raise StoreError(f"--database {path} is a backup (pzq-ctl backup), not a store: "
                         f"restore it with --database {path / 'store'} and --archive-dir "
                         f"{path / 'archive'}, on a copy of it")
    if others:
        shown = ", ".join(others[:SHOWN]) + (", ..." if len(others) > SHOWN else "")
        raise StoreError(f"--database {path} holds other files and no pzq store ({shown}): "
                         "give a new or empty directory, or the directory of a store")


def _is_a_backup(path: Path) -> bool:
    """The folder pzq-ctl backup wrote, its store and archive in it (the store's manifest
    renamed once a node was started on it)."""
    return any((path / "store" / name).is_file()
               for name in ("backup-manifest.json", "backup-manifest.restored.json"))


SHARD_STORE = re.compile(r"^shard-(\d+)$")
SHARDS_PARENT_NAME = re.compile(r"^(shard-\d+|lost|lost\+found)$")


def refuse_other_content_for_shards(path: Path) -> None:
    """StoreError when ``path``, the --database of ``--shards``, holds anything but the
    shards' stores: one node's store there would have the shards' folders inside it."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"--database {path} is not a directory")
    if not path.is_dir():
        return
    if (path / "CURRENT").exists():
        raise StoreError(f"--database {path} holds one node's store; --shards keeps each "
                         f"shard's store in {path}/shard-K: give the shards a directory "
                         f"of their own, e.g. --database {path.name}-shards")
    others = sorted(entry.name for entry in path.iterdir()
                    if not SHARDS_PARENT_NAME.match(entry.name))
    if others:
        shown = ", ".join(others[:SHOWN]) + (", ..." if len(others) > SHOWN else "")
        raise StoreError(f"--database {path} holds other files than the shards' stores "
                         f"({shown}): give a new or empty directory, or that of --shards")


def unused_shard_stores(path: Path, shards: int) -> list[Path]:
    """The stores of shards numbered ``shards`` and up, left by a run with more shards."""
    if not path.is_dir():
        return []
    found = ((entry, SHARD_STORE.match(entry.name)) for entry in path.iterdir())
    return sorted(entry for entry, number in found if number and int(number[1]) >= shards)


TABLE_NAME = re.compile(r"^\d+\.(ldb|sst)$")


def refuse_lost_current(path: Path) -> None:
    """StoreError when the store's CURRENT is gone while its tables are there: LevelDB
    would make a new, empty store in the directory and delete those tables as files
    nobody names (a node started empty, every message of the tables lost). Its logs
    alone are read again without CURRENT, so a store of logs only is let through."""
    try:
        if not path.is_dir() or (path / "CURRENT").exists():
            return
        tables = [entry.name for entry in path.iterdir() if TABLE_NAME.match(entry.name)]
    except OSError:
        return  # (refuse_unusable names it)
    if tables:
        raise StoreError(f"cannot open database {path}: its CURRENT file is missing and it "
                         f"holds {len(tables)} table(s) of messages ({min(tables)}...), which "
                         "a new store made there would delete; with the node stopped, "
                         f"pzq-ctl repair --database {path} brings back what is intact")


LOG_NAME = re.compile(r"^\d+\.log$")


def refuse_lost_log(path: Path) -> None:
    """StoreError when the store's CURRENT is there and no log beside it: LevelDB keeps
    the log its MANIFEST names from each open on (pzq fsyncs the directory after the
    open, so a power cut keeps its name), and opens a store whose log is gone without
    a word, every message written since its last table lost (all 100 of a store
    whose messages were in the log: it started empty, with a new node id)."""
    try:
        if not path.is_dir() or not (path / "CURRENT").exists():
            return
        if any(LOG_NAME.match(entry.name) for entry in path.iterdir()):
            return
    except OSError:
        return  # (refuse_unusable names it)
    raise StoreError(f"cannot open database {path}: its log (NNNNNN.log) is missing beside "
                     "its CURRENT, and LevelDB would open it without the messages written "
                     "since its last table; put the log back or restore a backup (a store "
                     "that never took a message: remove the directory)")


LEVELDB_FILE = re.compile(r"^(CURRENT|LOCK|MANIFEST-\d+|\d+\.(log|ldb|sst))$")


def refuse_unusable(path: Path) -> None:
    """StoreError, naming them, when this user may not read and write the directory or
    read a store file in it (write its LOCK): LevelDB tells the first it meets, a
    missing permission reads as a damaged store to its repair (which moves a table it
    cannot open into lost/), and Python's own checks of a folder it may not read
    raise PermissionError."""
    try:
        if not path.is_dir():
            return
        if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
            raise StoreError(f"database directory {path} is not readable and writable by "
                             "this user (permission denied): give it to the node's user")
        denied = sorted(entry.name for entry in path.iterdir()
                        if LEVELDB_FILE.match(entry.name) and not os.access(
                            entry, os.R_OK | (os.W_OK if entry.name == "LOCK" else 0)))
    except PermissionError:
        raise StoreError(f"database directory {path} cannot be reached by this user "
                         "(permission denied on a folder above it)") from None
    if denied:
        shown = ", ".join(denied[:SHOWN]) + (", ..." if len(denied) > SHOWN else "")
        raise StoreError(f"database directory {path} holds files this user may not read "
                         f"(or write, its LOCK) (permission denied: {shown}): give them to the "
                         "node's user")
