"""A Spark 4 Python Data Source named ``zper`` over a pzq archive directory.

    from pzq.spark import ZperDataSource
    spark.dataSource.register(ZperDataSource)
    df = spark.read.format("zper").option("topics", "orders").load("/var/lib/pzq/archive")

One partition per segment file, parsed on the executors (which need pzq and
pyarrow installed, or pzq shipped with ``--py-files``). A torn tail is skipped.
Options: ``topics`` (comma separated; default all), ``start_offset`` and
``end_offset`` (byte offsets within each topic, end exclusive).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pzq.archive.entry import ArchivedMessage
from pzq.archive.files import read_segment
from pzq.archive.topiclog import list_segments
from pzq.errors import ArchiveFormatError

SCHEMA = ("topic string, offset long, key binary, msg_id binary, stored_us long, "
          "first_delivered_us long, acked_us long, deliveries int, origin string, "
          "parts array<binary>, outcome string")
ROWS_PER_BATCH = 4096


@dataclass(frozen=True)
class SegmentPartition(InputPartition):
    topic: str
    path: str
    start: int  # the segment's first offset
    begin: int  # read records from this offset on
    end: int | None  # up to this offset, exclusive


class ZperDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "zper"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: object) -> ZperReader:
        return ZperReader(self.options)


class ZperReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        if "path" not in options:
            raise ValueError("give the archive directory: .load(ARCHIVE_DIR)")
        self.directory = Path(options["path"])
        topics = options.get("topics", "")
        self.topics = [topic.strip() for topic in topics.split(",") if topic.strip()]
        self.begin = int(options.get("start_offset", 0))
        end = options.get("end_offset")
        self.end = int(end) if end is not None else None

    def partitions(self) -> list[SegmentPartition]:
        topics = self.topics or sorted(path.name for path in self.directory.iterdir()
                                       if path.is_dir())
        partitions = []
        for topic in topics:
            segments = list_segments(self.directory / topic)
            for index, segment in enumerate(segments):
                following = segments[index + 1].start if index + 1 < len(segments) else None
                if following is not None and following <= self.begin:
                    continue  # wholly before start_offset
                if self.end is not None and segment.start >= self.end:
                    continue
                partitions.append(SegmentPartition(topic, str(segment.path), segment.start,
                                                   self.begin, self.end))
        return partitions

    def read(self, partition: SegmentPartition) -> Iterator[object]:
        import pyarrow as pa  # on the executor

        arrow_schema = pa.schema([
            ("topic", pa.string()), ("offset", pa.int64()), ("key", pa.binary()),
            ("msg_id", pa.binary()), ("stored_us", pa.int64()),
            ("first_delivered_us", pa.int64()), ("acked_us", pa.int64()),
            ("deliveries", pa.int32()), ("origin", pa.string()),
            ("parts", pa.list_(pa.binary())), ("outcome", pa.string())])
        columns: dict[str, list] = {name: [] for name in arrow_schema.names}
        for offset, message in _messages(partition):
            for name, value in (("topic", partition.topic), ("offset", offset),
                                ("key", message.key), ("msg_id", message.msg_id),
                                ("stored_us", message.stored_us),
                                ("first_delivered_us", message.first_delivered_us),
                                ("acked_us", message.acked_us),
                                ("deliveries", message.deliveries),
                                ("origin", message.origin), ("parts", list(message.parts)),
                                ("outcome", message.outcome)):
                columns[name].append(value)
            if len(columns["offset"]) >= ROWS_PER_BATCH:
                yield pa.RecordBatch.from_pydict(columns, schema=arrow_schema)
                columns = {name: [] for name in arrow_schema.names}
        if columns["offset"]:
            yield pa.RecordBatch.from_pydict(columns, schema=arrow_schema)


def _messages(partition: SegmentPartition) -> Iterator[tuple[int, ArchivedMessage]]:
    """The whole records of one segment; reading stops at a torn or damaged tail."""
    try:
        for offset, frames in read_segment(Path(partition.path), partition.start,
                                           partition.begin, partition.end):
            yield offset, ArchivedMessage.from_frames(frames, offset)
    except ArchiveFormatError:
        return
