"""Bringing a damaged store back: LevelDB's repair, run while no node has it open.

LevelDB's repair rebuilds the store's table list from every file it can read: the
tables whole, the logs up to the first damaged record. What it cannot read is gone;
what it reports is what the store holds afterwards. The message counters kept in
the store are counted afresh, since what was lost is no longer stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import plyvel

from pzq.errors import StoreError
from pzq.store import keyspace
from pzq.store.directory import refuse_unusable
from pzq.store.leveldb import leveldb_reason, read_everything
from pzq.store.store import COUNTERS

STORE_FILE = re.compile(r"^(CURRENT|\d+\.(log|ldb|sst))$")  # a store's messages are in these


@dataclass(frozen=True)
class RepairReport:
    was_damaged: bool
    damage: str  # LevelDB's reason the store would not open or read; empty when it did
    messages: int  # own messages readable afterwards
    dead_letters: int


def repair(path: Path) -> RepairReport:
    """Run LevelDB's repair on the store at ``path``; StoreError if it is in use,
    missing, or still unreadable afterwards."""
    refuse_unusable(path)  # a file it may not read would be moved aside as damaged
    if not path.is_dir() or not any(STORE_FILE.match(entry.name) for entry in path.iterdir()):
        raise StoreError(f"{path} holds no pzq store")
    damage = _why_it_does_not_open(path)  # (refuses a store a running node holds)
    if damage and not (path / "CURRENT").exists():
        damage = "its CURRENT file is missing"  # (LevelDB: "does not exist")
    try:
        # With paranoid checks LevelDB's repair reads every block with its checksum and
        # rewrites a table around a damaged one; without, it keeps a damaged block that
        # still parses (1 damage in 4 at random places, measured), and the store stays
        # unreadable.
        plyvel.repair_db(str(path), paranoid_checks=True)
    except plyvel.Error as exc:
        raise StoreError(f"cannot repair {path}: {leveldb_reason(exc)}") from None
    if _why_it_does_not_open(path):
        raise StoreError(f"{path} does not open even after LevelDB's repair")
    messages, dead = _recount(path)
    return RepairReport(bool(damage), damage, messages, dead)


def _why_it_does_not_open(path: Path) -> str:
    """What a node would meet at start: an open and a checked read of every block."""
    try:
        db = plyvel.DB(str(path), paranoid_checks=True)
        try:
            read_everything(db)
        finally:
            db.close()
    except plyvel.IOError as exc:
        reason = leveldb_reason(exc)
        if "lock" in reason.lower():
            raise StoreError(f"{path} is in use by a running node (its LevelDB lock is "
                             "held): stop the node first") from None
        return reason
    except plyvel.Error as exc:
        return leveldb_reason(exc)
    return ""


def _recount(path: Path) -> tuple[int, int]:
    """Count what is readable and write it as the store's counters."""
    db = plyvel.DB(str(path))
    try:
        own = stored_bytes = 0
        for value in db.iterator(prefix=keyspace.OWN_PREFIX, include_key=False):
            own += 1
            stored_bytes += len(value)
        dead = sum(1 for _ in db.iterator(prefix=keyspace.DEAD_PREFIX, include_value=False))
        db.put(keyspace.META_COUNTERS, COUNTERS.pack(own, stored_bytes, dead), sync=True)
    finally:
        db.close()
    return own, dead
