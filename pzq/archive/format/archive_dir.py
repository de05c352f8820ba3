"""Whether a directory given to a reader (Spark, ``pzq-archive``) is a pzq archive, so
that a wrong path (the node's store, the archive's parent, a typo's sibling) is one
clear error rather than a read of zero rows."""

from __future__ import annotations

import os
from pathlib import Path

from pzq.archive.format.raw import is_raw_topic
from pzq.archive.format.segments import list_segments

LOCK_NAME = ".lock"  # the node's lock file in its archive directory (pzq.archive.tier.lock)


def archive_dir_problem(directory: Path) -> str | None:
    """Why a path given as an archive directory cannot be read as one (missing, not a
    directory, unreadable, not an archive), or None: every reader's one check, so
    that each says it in the same words before it reads."""
    if not directory.exists():
        return f"the archive directory {directory} does not exist"
    if not directory.is_dir():
        return f"the archive directory {directory} is not a directory"
    if not os.access(directory, os.R_OK | os.X_OK):
        return f"the archive directory {directory} cannot be read"
    return not_an_archive(directory)


def not_an_archive(directory: Path) -> str | None:
    """Why an existing directory is not an archive, or None when it is one: empty (a
    node's before its first record), holding a node's lock file, or a topic folder."""
    entries = list(directory.iterdir())
    if not entries or (directory / LOCK_NAME).is_file():
        return None
    if any(entry.is_dir() and _topic_folder(entry) for entry in entries):
        return None
    return (f"{directory} is not a pzq archive directory: it holds no topic folder with "
            f"segments (<20-digit offset>.dat) and no node's {LOCK_NAME}; give the "
            "directory of the node's --archive-dir")


def _topic_folder(folder: Path) -> bool:
    """Segments, a ZPER writer's mark, or nothing yet (its first segment not written)."""
    return is_raw_topic(folder) or bool(list_segments(folder)) or not any(folder.iterdir())
