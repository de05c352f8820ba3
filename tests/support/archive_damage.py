"""Archives written by pzq's own writer, and damage done to them on disk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import Segment, list_segments

START_US = 1_700_000_000_000_000
GARBAGE = b"\xff\x00\x13"  # not UTF-8 from the first byte on


def message(n: int, topic: str = "orders", acked_us: int = START_US) -> ArchivedMessage:
    return ArchivedMessage(b"0a0b0c0d-%016x" % n, b"m%d" % n, topic, acked_us - 5000,
                           acked_us - 1000, acked_us, 1 + n % 3, "0a0b0c0d",
                           (b"body %d" % n, b"x" * (n % 7)))


def write_archive(directory: Path, count: int = 900, topic: str = "orders",
                  segment_size: int = 20_000) -> list[int]:
    """``count`` messages, one a second from START_US; their offsets."""
    archive = Archive(directory, segment_size=segment_size)
    archive.open(now=0)
    offsets = [archive.append(message(n, topic, START_US + n * 1_000_000), now=0)
               for n in range(count)]
    archive.close(now=0)
    return offsets


def segment_of(directory: Path, topic: str, offset: int) -> Segment:
    return [s for s in list_segments(directory / topic) if s.start <= offset][-1]


def overwrite(directory: Path, topic: str, offset: int, new: bytes) -> Segment:
    segment = segment_of(directory, topic, offset)
    data = bytearray(segment.path.read_bytes())
    position = offset - segment.start
    data[position:position + len(new)] = new
    segment.path.write_bytes(bytes(data))
    return segment


def metadata_span(directory: Path, topic: str, offset: int) -> tuple[int, int]:
    """(offset, length) of the metadata payload of the record at ``offset``."""
    segment = segment_of(directory, topic, offset)
    data = segment.path.read_bytes()
    key_at, key_length = _frame(data, offset - segment.start)
    metadata_at, length = _frame(data, key_at + key_length)
    return segment.start + metadata_at, length


def _frame(data: bytes, position: int) -> tuple[int, int]:
    """(payload position, length) of the frame at ``position``, as the format says."""
    if data[position] & 0x02:
        return position + 9, int.from_bytes(data[position + 1:position + 9], "big")
    return position + 2, data[position + 1]


def damage_metadata(directory: Path, topic: str, offset: int) -> int:
    """Three bytes changed in the middle of a record's metadata; the first one's offset."""
    start, length = metadata_span(directory, topic, offset)
    changed = start + length // 2
    overwrite(directory, topic, changed, GARBAGE)
    return changed


def archive_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """``pzq-archive ARGS`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "pzq.archive.tool", *args],
                          capture_output=True, text=True, timeout=30, check=False)
