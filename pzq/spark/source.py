"""A Spark 4 Python Data Source named ``zper`` over pzq archive directories (its
users import ``session`` and ``ZperDataSource`` from pzq.spark).

Several directories (a cluster's nodes') read as one table, each row's ``node``
naming its directory: ``.load([DIR, ...])``, ``.load("DIR,DIR")`` or the
``monitor`` option (pzq.spark.archives).

Partitions are planned per directory from the segments' offset indexes
(pzq.spark.plan): a segment is cut at record starts about every ``partition_bytes``.
They are parsed on the executors (which need pzq and pyarrow installed, or pzq
shipped with ``--py-files``) straight into Arrow record batches (pzq.spark.arrow),
by the exact reader from a damaged record on. A torn tail of a topic's last segment
is skipped. Options: ``topics`` (comma separated; default all), ``start_offset`` and
``end_offset`` (byte offsets within each topic, end exclusive), ``partition_bytes``
(default 16 MiB), ``mode`` and ``columnNameOfCorruptRecord`` for damaged records
(see ``pzq.spark.reads.ReadOptions``). ``spark.readStream.format("zper")`` streams
it (pzq.spark.stream).
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
from pzq.archive.format.files import segment_items, within
from pzq.archive.format.records import MessageRecord, RawRecord
from pzq.archive.format.segments import Segment
from pzq.spark.plan import plan_archive
from pzq.spark.reads import FAILFAST, SCHEMA, ReadOptions, SegmentPartition
from pzq.spark.stream import StreamOptions, stream_reader

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
        # Every option, a stream's too, refused at load(): a stream reader that fails to
        # build leaves PySpark's runner an UnboundLocalError after pzq's error.
        corrupt = StreamOptions.parse(self.options).read.corrupt_column
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
        return [partition for archive in options.archives
                for partition in plan_archive(archive, options.topics, options.begin,
                                              options.end, options.partition_bytes)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentPartition):
            return  # Spark's stand-in partition when there are none: nothing to read
        from pzq.spark.arrow import arrow_schema, fast_batches  # pyarrow, on the executor

        begin, end = self._range(partition)
        schema = arrow_schema(self.options.corrupt_column)
        exact_from = yield from fast_batches(partition, begin, end, schema)
        if exact_from is None:
            return
        batches = ArrowBatches(schema)
        # The records before exact_from are in the batches above (or before begin).
        for row in self._rows(partition, exact_from, max(begin, exact_from), end):
            batch = batches.add(row)
            if batch is not None:
                yield batch
        if batches.pending():
            yield batches.flush()

    def _range(self, partition: SegmentPartition) -> tuple[int, int | None]:
        """The partition's range within the read's own (a stream's batch has one)."""
        begin = max(self.options.begin, partition.begin)
        ends = [end for end in (self.options.end, partition.end) if end is not None]
        return begin, min(ends) if ends else None

    def _rows(self, partition: SegmentPartition, seek_to: int, begin: int,
              end: int | None) -> Iterator[dict[str, Any]]:
        """Rows by the exact reader, walking from the record start at or before
        ``seek_to`` as a read from ``begin`` would pass it."""
        segment = Segment(partition.start, Path(partition.path))
        items = segment_items(partition.topic, segment, partition.last, seek_to,
                              partition.raw)
        node = {"node": partition.node}
        for item in within(items, begin, end):
            if isinstance(item, MessageRecord):
                yield message_row(partition.topic, item) | node
                continue
            if isinstance(item, RawRecord):
                yield raw_row(partition.topic, item) | node
                continue
            if self.options.mode == FAILFAST:
                raise item.error()
            log_damage(item)
            if self.options.corrupt_column:
                yield damaged_row(item, self.options.corrupt_column) | node


def message_row(topic: str, record: MessageRecord) -> dict[str, Any]:
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
    """Rows of the exact reader gathered into Arrow record batches."""

    def __init__(self, schema: Any, rows_per_batch: int = 4096) -> None:
        self.schema = schema
        self.rows_per_batch = rows_per_batch
        self.rows: list[dict[str, Any]] = []

    def add(self, row: dict[str, Any]) -> Any:
        self.rows.append(row)
        return self.flush() if len(self.rows) >= self.rows_per_batch else None

    def pending(self) -> bool:
        return bool(self.rows)

    def flush(self) -> Any:
        import pyarrow as pa

        batch = pa.RecordBatch.from_pylist(self.rows, schema=self.schema)
        self.rows = []
        return batch
