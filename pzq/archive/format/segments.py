"""Segment files: ``<topic dir>/<20-digit start offset>.dat``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".dat"


@dataclass(frozen=True)
class Segment:
    start: int
    path: Path

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def segment_name(start: int) -> str:
    return f"{start:020d}{SUFFIX}"


def segment_path(directory: Path, start: int) -> Path:
    return directory / segment_name(start)


def segment_start(path: Path) -> int | None:
    """The start offset a segment file's name gives; None for another name."""
    stem = path.name[:-len(SUFFIX)] if path.name.endswith(SUFFIX) else ""
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def list_segments(directory: Path) -> list[Segment]:
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        start = segment_start(path)
        if start is not None:
            found.append(Segment(start, path))
    return sorted(found, key=lambda segment: segment.start)
