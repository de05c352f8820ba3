"""Spark Structured Streaming over a pzq archive: ``spark.readStream.format("zper")``.

    stream = (spark.readStream.format("zper").option("topics", "orders")
              .load("/var/lib/pzq/archive"))

The stream's offset is a JSON object of each archive directory's topics' byte
offsets (``{"/var/lib/pzq/archive": {"orders": 70180}}``): where the next
micro-batch starts. A micro-batch reads, per directory and topic, the
whole records from there up to the end of the whole records in the files when it
is planned (or, with the ``node`` option, up to the end the node has fsync'd),
partitions planned as the batch reader's (pzq.spark.plan). A record is
read by exactly one batch, so a query stopped and restarted from its checkpoint
goes on where the last committed batch ended, with no gap and no duplicate.

Options, besides the batch reader's ``topics``, ``partition_bytes``, ``mode`` and
``columnNameOfCorruptRecord``: ``startingOffsets`` ``earliest`` (default: every
record kept) or ``latest`` (only records appended after the query first starts);
``node``, a node's monitor endpoint (e.g. ``tcp://127.0.0.1:11133``), to read only
what its last fsync made durable (a stream of one directory), asked with the keys of
``curve_client_key`` and ``curve_server_key`` when the node serves CURVE (as for
``monitor``, pzq.spark.archives). Topics, and directories, that appear later are
read from their first offset.

Records that retention deleted before the stream read them are lost to it: as
Spark's Kafka source, ``failOnDataLoss`` ``true`` (the default) fails the query
naming them, ``false`` logs one warning line (``archive_records_lost``) and goes on
from the first record kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from pzq.archive.damage import logger
from pzq.archive.format.files import whole_end
from pzq.archive.format.segments import list_segments
from pzq.spark.archives import ArchiveDir, archive_topics, ask_stats, curve_from_files
from pzq.spark.plan import plan_topic
from pzq.spark.reads import ReadOptions, SegmentPartition

EARLIEST, LATEST = "earliest", "latest"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
Offsets = dict[str, dict[str, int]]  # archive directory -> topic -> byte offset


@dataclass(frozen=True)
class StreamOptions:
    read: ReadOptions
    starting: str
    node: str | None
    # The key files, read when the node is asked: the options travel to the executors,
    # a secret key read from them need not.
    curve_files: tuple[str | None, str | None] = (None, None)
    fail_on_data_loss: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        starting = starting_offsets(options)
        read, node = ReadOptions.parse(options), options.get("node")
        if node is not None and len(read.archives) > 1:
            raise ValueError("node caps the stream of one archive directory, not of "
                             f"{len(read.archives)}")
        # Key files that do not read failed the query already (ReadOptions.parse).
        curve_files = (options.get("curve_client_key"), options.get("curve_server_key"))
        return cls(read, starting, node, curve_files, fails_on_data_loss(options))


def fails_on_data_loss(options: Mapping[str, str]) -> bool:
    """The stream's ``failOnDataLoss``; ValueError for another value than true or false
    (asked at ``load()`` too, as ``startingOffsets``)."""
    text = options.get(FAIL_ON_DATA_LOSS, "true")
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"{FAIL_ON_DATA_LOSS} is true or false, not {text!r}")
    return text.strip().lower() == "true"


class ArchiveDataLossError(Exception):
    """Records a stream had not read yet are gone from the archive (retention)."""


def starting_offsets(options: Mapping[str, str]) -> str:
    """The stream's ``startingOffsets``; ValueError for another value. Also asked by
    the source's schema, at ``load()``: a stream reader that fails to build leaves
    PySpark's runner an UnboundLocalError of its own after pzq's error."""
    starting = options.get("startingOffsets", EARLIEST).lower()
    if starting not in (EARLIEST, LATEST):
        raise ValueError(f"startingOffsets is {EARLIEST} or {LATEST}, not {starting!r}")
    return starting


# The batch reader (pzq.spark.source.ZperReader), which reads each planned range:
# passed in, as pzq.spark.source builds on this module.
BatchReader = Callable[[ReadOptions], DataSourceReader]


class ZperStreamReader(DataSourceStreamReader):
    def __init__(self, options: StreamOptions, batch_reader: BatchReader) -> None:
        self.batch_reader = batch_reader
        self.options = options

    # -- offsets (on the driver) ------------------------------------------------------

    def _topics(self, archive: ArchiveDir) -> tuple[str, ...]:
        read = self.options.read
        if read.topics:
            return read.topics
        return tuple(topic for topic in archive_topics(archive.directory)
                     if list_segments(archive.directory / topic))

    def _ends(self) -> Offsets:
        """Each topic's end of whole records now (or of what the node fsync'd)."""
        flushed = self._node_flushed() if self.options.node else None
        ends: Offsets = {}
        for archive in self.options.read.archives:
            ends[archive.key] = {}
            for topic in self._topics(archive):
                end = whole_end(archive.directory, topic)[1]
                if flushed is not None:
                    end = min(end, flushed.get(topic, 0))
                ends[archive.key][topic] = end
        return ends

    def _node_flushed(self) -> dict[str, int]:
        assert self.options.node is not None
        stats = ask_stats(self.options.node, curve_from_files(*self.options.curve_files))
        return {topic: int(info["flushed_offset"])
                for topic, info in stats.get("archive", {}).get("topics", {}).items()}

    def initialOffset(self) -> Offsets:
        if self.options.starting == LATEST:
            return self._ends()
        return {archive.key: {topic: whole_end(archive.directory, topic)[0]
                              for topic in self._topics(archive)}
                for archive in self.options.read.archives}

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: object = None) -> Offsets:
        before = self._per_directory(start or {})
        ends = self._ends()
        # A topic never goes back: keep what the query already read past, and the
        # offsets of a directory no longer read (it may be read again).
        return before | {key: _at_least(topics, before.get(key, {}))
                         for key, topics in ends.items()}

    def partitions(self, start: dict[str, Any],
                   end: dict[str, Any]) -> Sequence[InputPartition]:
        read = self.options.read
        starts, ends = self._per_directory(start), self._per_directory(end)
        found: list[InputPartition] = []
        for archive in read.archives:
            begins = starts.get(archive.key, {})  # a directory added later: from its start
            for topic, stop in sorted(ends.get(archive.key, {}).items()):
                begin = begins.get(topic, 0)
                if topic in begins:
                    begin = self._kept_from(archive, topic, begin)
                if stop > begin:
                    found += plan_topic(archive.directory, topic, begin, stop,
                                        read.partition_bytes, archive.node)
        return found

    def _kept_from(self, archive: ArchiveDir, topic: str, begin: int) -> int:
        """Where the batch starts: ``begin``, or the first offset kept when retention
        deleted the records from ``begin`` before the stream read them."""
        segments = list_segments(archive.directory / topic)
        first = segments[0].start if segments else begin
        if begin >= first:
            return begin
        self._lost(f"records of topic {topic} in {archive.directory} at offsets {begin} "
                   f"to {first} were deleted (--retain-hours, --retain-bytes) before this "
                   "stream read them", directory=str(archive.directory), topic=topic,
                   begin=begin, first_kept=first)
        return first

    def _lost(self, words: str, **fields: Any) -> None:
        if self.options.fail_on_data_loss:
            raise ArchiveDataLossError(f"{words}; to go on without them, restart the query "
                                       f"with .option('{FAIL_ON_DATA_LOSS}', 'false')")
        logger().warning("archive_records_lost", **fields)

    def _per_directory(self, offset: dict[str, Any]) -> Offsets:
        """A checkpoint's offset as directory -> topic -> offset. One written before
        a stream could read several directories is topic -> offset, of the one
        directory it read then: the first given now."""
        if offset and all(isinstance(value, int) for value in offset.values()):
            return {self.options.read.archives[0].key: offset}
        return offset

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the archive's files are only read."""

    # -- reading (on the executors) ---------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentPartition):
            return
        # The partition's own range only: start_offset and end_offset are the batch's.
        whole = replace(self.options.read, begin=0, end=None)
        try:
            yield from self.batch_reader(whole).read(partition)
        except FileNotFoundError:  # retention deleted the segment since the batch was planned
            self._lost(f"segment {partition.path} of topic {partition.topic} was deleted "
                       "(--retain-hours, --retain-bytes) before this stream read it",
                       segment=partition.path, topic=partition.topic)


def _at_least(ends: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return before | {topic: max(end, before.get(topic, 0)) for topic, end in ends.items()}


def stream_reader(options: Mapping[str, str], batch_reader: BatchReader) -> ZperStreamReader:
    return ZperStreamReader(StreamOptions.parse(options), batch_reader)
