"""What one read of a pzq archive is, for the batch reader (pzq.spark.source) and the
streaming reader (pzq.spark.stream) alike: its columns, its options and its
partitions, each the records of one segment that start in a range of offsets
(planned by pzq.spark.plan)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from pzq.spark.archives import ArchiveDir, archive_dirs

SCHEMA = ("topic string, offset long, key binary, msg_id binary, stored_us long, "
          "first_delivered_us long, acked_us long, deliveries int, origin string, "
          "parts array<binary>, outcome string, node string")
COLUMNS = tuple(column.split()[0] for column in SCHEMA.split(", "))
PERMISSIVE, FAILFAST = "PERMISSIVE", "FAILFAST"
PARTITION_BYTES = 16 << 20  # a few hundred milliseconds of one task's parsing


@dataclass(frozen=True)
class ReadOptions:
    """The options of one read, checked on the driver before any task runs.

    ``mode``: ``PERMISSIVE`` (default) skips a damaged record and logs one warning
    line for it on the executor (topic, segment, offset); ``FAILFAST`` fails the
    query at the first one, naming it. ``corrupt_column`` (Spark's
    ``columnNameOfCorruptRecord``): in PERMISSIVE mode, each damaged record also
    becomes a row with its topic and offset, that column describing the damage and
    the message columns null; other rows have it null.
    """

    archives: tuple[ArchiveDir, ...]  # pzq.spark.archives
    topics: tuple[str, ...]
    begin: int
    end: int | None
    mode: str
    corrupt_column: str | None
    partition_bytes: int = PARTITION_BYTES

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        topics = tuple(topic.strip() for topic in options.get("topics", "").split(",")
                       if topic.strip())
        end = options.get("end_offset")
        begin = _offset(options.get("start_offset", "0"))
        mode = _mode(options.get("mode"))
        corrupt = _corrupt_column(options.get("columnNameOfCorruptRecord"))
        partition_bytes = _partition_bytes(options.get("partition_bytes"))
        # Last: it may ask nodes for their directories, once the rest is known good.
        return cls(archive_dirs(options), topics, begin,
                   None if end is None else _offset(end), mode, corrupt, partition_bytes)


def _offset(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"an offset is a byte position (0 or more), not {text!r}")
    return int(text)


def _partition_bytes(text: str | None) -> int:
    if text is None:
        return PARTITION_BYTES
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"partition_bytes is a number of bytes (1 or more), not {text!r}")
    return int(text)


def _mode(text: str | None) -> str:
    mode = (text or PERMISSIVE).upper()
    if mode not in (PERMISSIVE, FAILFAST):
        raise ValueError(f"mode is {PERMISSIVE} or {FAILFAST}, not {text!r}")
    return mode


def _corrupt_column(name: str | None) -> str | None:
    if name is not None and (not name.replace("_", "").isalnum() or name in COLUMNS):
        raise ValueError(f"columnNameOfCorruptRecord {name!r} must be a new column name")
    return name


@dataclass(frozen=True)
class SegmentPartition(InputPartition):
    topic: str
    path: str
    start: int  # the segment's first offset
    last: bool  # the topic's last segment: a torn tail there is a write in progress
    raw: bool = False  # a topic of raw ZPER records (pzq.archive.format.raw)
    begin: int = 0  # topic offsets: the records that start in [begin, end)
    end: int | None = None  # None: to the end of the segment
    node: str = ""  # the archive directory's name in rows (pzq.spark.archives)
