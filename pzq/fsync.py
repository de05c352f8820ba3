"""Names that survive a power cut: a file's fsync makes its bytes durable, not its
name; the name is an entry of its directory, durable once the directory is fsync'd."""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: Path) -> None:
    """fsync a directory, so the names created in it (or removed) are on disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directories(path: Path) -> None:
    """``mkdir -p`` whose new directories keep their names: the parent of each one
    created is fsync'd. OSError as mkdir's."""
    missing = [place for place in (path, *path.parents) if not place.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):  # outermost first
        sync_directory(created.parent)
