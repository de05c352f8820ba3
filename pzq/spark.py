"""A Spark 4 Python Data Source named ``zper`` over a pzq archive directory.

    from pzq.spark import session
    spark = session("orders-report")  # or register ZperDataSource with your own session
    df = spark.read.format("zper").option("topics", "orders").load("/var/lib/pzq/archive")

One partition per segment file, parsed on the executors (which need pzq and
pyarrow installed, or pzq shipped with ``--py-files``). A torn tail of a topic's
last segment is skipped. Options: ``topics`` (comma separated; default all),
``start_offset`` and ``end_offset`` (byte offsets within each topic, end exclusive),
``mode`` and ``columnNameOfCorruptRecord`` for damaged records (see
``pzq.spark_reads.ReadOptions``).
``spark.readStream.format("zper")`` streams it (pzq.spark_stream).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from pzq.archive.damage import DamagedRecord, log_damage
from pzq.archive.files import segment_items, within
from pzq.archive.raw import RawRecord, is_raw_topic
from pzq.archive.records import Record
from pzq.archive.segments import Segment, list_segments
from pzq.spark_reads import FAILFAST, SCHEMA, ReadOptions, SegmentPartition
from pzq.spark_stream import stream_reader

ROWS_PER_BATCH = 4096
WORKER_PYTHON = "spark.pyspark.python"


def session(app_name: str = "pzq", master: str = "local[*]",
            config: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession (or the running one) with the ``zper`` source registered.

    Spark starts its Python workers with ``PYSPARK_PYTHON`` or ``python3`` from PATH,
    which outside an activated virtual environment lacks pzq and pyarrow. So with a
    local master and neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` set, the
    workers run this interpreter. On a cluster, set ``spark.pyspark.python`` to the
    executors' Python with pzq installed.
    """
    settings = dict(config or {})
    python = settings.get(WORKER_PYTHON) or os.environ.get("PYSPARK_PYTHON")
    if python is None and master.startswith("local"):
        python = sys.executable
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python  # what PySpark reads as its context starts
        settings[WORKER_PYTHON] = python
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(ZperDataSource)
    return spark


class ZperDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "zper"

    def schema(self) -> str:
        corrupt = ReadOptions.parse(self.options).corrupt_column
        return SCHEMA + (f", {corrupt} string" if corrupt else "")

    def reader(self, schema: object) -> ZperReader:
        return ZperReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return stream_reader(self.options, ZperReader)


class ZperReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        topics = options.topics or tuple(sorted(path.name for path in
                                                options.directory.iterdir() if path.is_dir()))
        partitions: list[InputPartition] = []
        for topic in topics:
            segments = list_segments(options.directory / topic)
            raw = is_raw_topic(options.directory / topic)
            for index, segment in enumerate(segments):
                following = segments[index + 1].start if index + 1 < len(segments) else None
                if following is not None and following <= options.begin:
                    continue  # wholly before start_offset
                if options.end is not None and segment.start >= options.end:
                    continue
                partitions.append(SegmentPartition(topic, str(segment.path), segment.start,
                                                   following is None, raw))
        return partitions

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentPartition):
            return  # Spark's stand-in partition when there are none: nothing to read
        batches = ArrowBatches(self.options.corrupt_column)
        for row in self._rows(partition):
            batch = batches.add(row)
            if batch is not None:
                yield batch
        if batches.pending():
            yield batches.flush()

    def _rows(self, partition: SegmentPartition) -> Iterator[dict[str, Any]]:
        segment = Segment(partition.start, Path(partition.path))
        items = segment_items(partition.topic, segment, partition.last, self.options.begin,
                              partition.raw)
        for item in within(items, self.options.begin, self.options.end):
            if isinstance(item, Record):
                yield message_row(partition.topic, item)
                continue
            if isinstance(item, RawRecord):
                yield raw_row(partition.topic, item)
                continue
            if self.options.mode == FAILFAST:
                raise item.error()
            log_damage(item)
            if self.options.corrupt_column:
                yield damaged_row(item, self.options.corrupt_column)


def message_row(topic: str, record: Record) -> dict[str, Any]:
    message = record.message
    return {"topic": topic, "offset": record.offset, "key": message.key,
            "msg_id": message.msg_id, "stored_us": message.stored_us,
            "first_delivered_us": message.first_delivered_us, "acked_us": message.acked_us,
            "deliveries": message.deliveries, "origin": message.origin,
            "parts": list(message.parts), "outcome": message.outcome}


def raw_row(topic: str, record: RawRecord) -> dict[str, Any]:
    """A ZPER producer's message: its frames in ``parts``, no key and no metadata."""
    return {"topic": topic, "offset": record.offset, "parts": list(record.frames)}


def damaged_row(damaged: DamagedRecord, column: str) -> dict[str, Any]:
    return {"topic": damaged.topic, "offset": damaged.offset, column: damaged.describe()}


class ArrowBatches:
    """Rows gathered into Arrow record batches of ROWS_PER_BATCH (built on the executor)."""

    def __init__(self, corrupt_column: str | None) -> None:
        import pyarrow as pa  # on the executor

        fields = [("topic", pa.string()), ("offset", pa.int64()), ("key", pa.binary()),
                  ("msg_id", pa.binary()), ("stored_us", pa.int64()),
                  ("first_delivered_us", pa.int64()), ("acked_us", pa.int64()),
                  ("deliveries", pa.int32()), ("origin", pa.string()),
                  ("parts", pa.list_(pa.binary())), ("outcome", pa.string())]
        if corrupt_column:
            fields.append((corrupt_column, pa.string()))
        self.schema = pa.schema(fields)
        self.rows: list[dict[str, Any]] = []

    def add(self, row: dict[str, Any]) -> Any:
        self.rows.append(row)
        return self.flush() if len(self.rows) >= ROWS_PER_BATCH else None

    def pending(self) -> bool:
        return bool(self.rows)

    def flush(self) -> Any:
        import pyarrow as pa

        batch = pa.RecordBatch.from_pylist(self.rows, schema=self.schema)
        self.rows = []
        return batch
