"""A partition's records as Arrow record batches built column-wise: the executors'
fast path.

Frames are walked in one loop (pzq.archive.format.walker) and every metadata object of
a batch is parsed at once by Arrow's JSON reader, with the types pzq's metadata
must have. The fast path only ever yields rows the exact reader (pzq.archive.format.records
with ``parse_metadata``) would yield the same: at the first batch it is not sure
of (frames that do not parse, metadata Arrow refuses or that could read otherwise
in Python: a missing or null field, a line break, a msg_id beyond ASCII, bytes
that are not UTF-8), it stops and tells the caller where the exact reader must
take over. Damaged records are rare, so they cost the slow path only there.
"""

from __future__ import annotations

import io
from array import array
from bisect import bisect_left
from collections.abc import Generator
from itertools import accumulate
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from pzq.archive.format.walker import FrameRun, frame_run
from pzq.archive.format.windows import read_window
from pzq.spark.reads import SegmentPartition

ROWS_PER_BATCH = 4096
BYTES_PER_BATCH = 64 << 20

FIELDS = [("topic", pa.string()), ("offset", pa.int64()), ("key", pa.binary()),
          ("msg_id", pa.binary()), ("stored_us", pa.int64()),
          ("first_delivered_us", pa.int64()), ("acked_us", pa.int64()),
          ("deliveries", pa.int32()), ("origin", pa.string()),
          ("parts", pa.list_(pa.binary())), ("outcome", pa.string()), ("node", pa.string())]
# The metadata fields a row takes, with the types parse_metadata checks.
METADATA = pa.schema([("topic", pa.string()), ("msg_id", pa.string()),
                      ("stored_us", pa.int64()), ("first_delivered_us", pa.int64()),
                      ("acked_us", pa.int64()), ("deliveries", pa.int32()),
                      ("origin", pa.string()), ("outcome", pa.string())])
PARSE = pa_json.ParseOptions(explicit_schema=METADATA, unexpected_field_behavior="ignore")
# One block for a whole batch, parsed on the task's own thread (its core is Spark's).
READ = pa_json.ReadOptions(use_threads=False, block_size=BYTES_PER_BATCH + ROWS_PER_BATCH)
FROM_METADATA = ("msg_id", "stored_us", "first_delivered_us", "acked_us", "deliveries",
                 "origin", "outcome")


def arrow_schema(corrupt_column: str | None) -> pa.Schema:
    fields = FIELDS + ([(corrupt_column, pa.string())] if corrupt_column else [])
    return pa.schema(fields)


def fast_batches(partition: SegmentPartition, begin: int, end: int | None,
                 schema: pa.Schema) -> Generator[pa.RecordBatch, None, int | None]:
    """Batches of the records that start in [begin, end) (topic offsets); returns
    None when all were read, or the offset of the first record the exact reader
    must read (every record before it is in a batch yielded or before ``begin``)."""
    window = read_window(Path(partition.path), begin - partition.start,
                         None if end is None else end - partition.start, partition.raw)
    base = partition.start + window.start  # the topic offset of window.data[0]
    stop = len(window.data) if end is None else min(len(window.data), end - base)
    position = 0
    while position < stop:
        run = frame_run(window.data, position, stop, ROWS_PER_BATCH, BYTES_PER_BATCH,
                        partition.raw)
        batch = None
        if run.starts:
            batch = (raw_batch if partition.raw else message_batch)(
                run, partition, base, schema)
            if batch is None:
                return base + position  # metadata to read the exact way
            first = bisect_left(run.starts, begin - base)
            if first < batch.num_rows:
                yield batch.slice(first)
        if run.broken:
            return base + run.end
        if not run.starts:
            break
        position = run.end
    return None


def message_batch(run: FrameRun, partition: SegmentPartition, base: int,
                  schema: pa.Schema) -> pa.RecordBatch | None:
    """pzq records as a batch; None if any metadata needs the exact reader."""
    metadata = _metadata(run.metadata)
    if metadata is None:
        return None
    count = len(run.starts)
    columns = {**_labels(partition, count), "offset": _offsets(run, base),
               "key": pa.array(run.keys, pa.binary()), "parts": _parts(run)}
    for name in FROM_METADATA:
        columns[name] = metadata.column(name).combine_chunks()
    columns["msg_id"] = columns["msg_id"].cast(pa.binary())  # ASCII: its latin-1 bytes
    return _batch(columns, count, schema)


def raw_batch(run: FrameRun, partition: SegmentPartition, base: int,
              schema: pa.Schema) -> pa.RecordBatch:
    """A ZPER producer's records: their frames in ``parts``, the other columns null."""
    count = len(run.starts)
    return _batch({**_labels(partition, count), "offset": _offsets(run, base),
                   "parts": _parts(run)}, count, schema)


def _labels(partition: SegmentPartition, count: int) -> dict[str, pa.Array]:
    """The columns every row of a partition has the same: its topic and node."""
    return {name: pa.repeat(pa.scalar(value, pa.string()), count)
            for name, value in (("topic", partition.topic), ("node", partition.node))}


def _metadata(objects: list[bytes]) -> Any:
    """The metadata of a batch as a table, or None where Python's ``json`` could
    read any of it otherwise (or not at all)."""
    lines = b"\n".join(objects)
    if lines.count(b"\n") != len(objects) - 1 or b"\r" in lines:
        return None  # a line break inside an object: Arrow would see two rows
    try:
        lines.decode()  # Python decodes the whole object first
        table = pa_json.read_json(io.BytesIO(lines + b"\n"), read_options=READ,
                                  parse_options=PARSE)
    except (pa.ArrowException, UnicodeDecodeError):
        return None
    if table.num_rows != len(objects) or any(column.null_count for column in table.columns):
        return None  # an object per line, each field present and typed
    msg_ids = table.column("msg_id").combine_chunks()
    if not pc.all(pc.string_is_ascii(msg_ids)).as_py():
        return None
    return table


def _offsets(run: FrameRun, base: int) -> pa.Array:
    positions = pa.py_buffer(array("q", run.starts))
    return pc.add(pa.Array.from_buffers(pa.int64(), len(run.starts), [None, positions]),
                  base)


def _parts(run: FrameRun) -> pa.Array:
    ends = pa.py_buffer(array("i", accumulate(run.part_counts, initial=0)))
    return pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), len(run.part_counts) + 1, [None, ends]),
        pa.array(run.parts, pa.binary()))


def _batch(columns: dict[str, Any], count: int, schema: pa.Schema) -> pa.RecordBatch:
    arrays = [columns[field.name] if field.name in columns else pa.nulls(count, field.type)
              for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
