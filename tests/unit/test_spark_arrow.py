"""The Spark source's fast path (frames walked column-wise, metadata parsed by Arrow,
partitions cut at index entries) gives exactly the rows of the exact reader."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from pzq.archive.damage import DamagedRecord
from pzq.archive.format.codec import encode_record
from pzq.archive.format.files import topic_items
from pzq.archive.format.records import MessageRecord, RawRecord
from pzq.archive.format.segments import list_segments
from pzq.archive.format.walker import frame_run
from pzq.archive.tier.archive import Archive
from pzq.spark.arrow import arrow_schema
from pzq.spark.plan import plan_topic
from pzq.spark.reads import ReadOptions
from pzq.spark.source import ZperReader, damaged_row, message_row, raw_row
from tests.support.archive_damage import damage_metadata, message, write_archive

pytestmark = pytest.mark.timeout(120)
CORRUPT = "_corrupt_record"


def exact_rows(directory: Path, topic: str, begin: int = 0, end: int | None = None,
               corrupt: str | None = CORRUPT) -> list[dict[str, object]]:
    """The rows as the exact reader makes them, a topic walked as one (a read of
    one directory names its rows' node by the directory's name)."""
    rows: list[dict[str, object]] = []
    for item in topic_items(directory, topic, begin, end):
        if isinstance(item, MessageRecord):
            rows.append(message_row(topic, item))
        elif isinstance(item, RawRecord):
            rows.append(raw_row(topic, item))
        elif isinstance(item, DamagedRecord) and corrupt:
            rows.append(damaged_row(item, corrupt))
    return [row | {"node": directory.name} for row in rows]


def source_rows(directory: Path, **options: str) -> tuple[list[dict[str, object]], int]:
    """The rows the data source's partitions give, and how many partitions."""
    read = ZperReader(ReadOptions.parse({"path": str(directory), **options}))
    partitions = read.partitions()
    batches = [batch for partition in partitions for batch in read.read(partition)]
    assert all(isinstance(batch, pa.RecordBatch) for batch in batches)
    schema = arrow_schema(options.get("columnNameOfCorruptRecord"))
    return pa.Table.from_batches(batches, schema=schema).to_pylist(), len(partitions)


def as_table(rows: list[dict[str, object]], corrupt: str | None) -> list[dict[str, object]]:
    return pa.Table.from_pylist(rows, schema=arrow_schema(corrupt)).to_pylist()


def test_partitions_cut_at_index_entries_read_the_rows_of_one_walk(tmp_path):
    offsets = write_archive(tmp_path, count=3000, segment_size=200_000)
    segments = list_segments(tmp_path / "orders")
    rows, partitions = source_rows(tmp_path, partition_bytes="20000")
    assert partitions > 3 * len(segments)
    assert rows == as_table(exact_rows(tmp_path, "orders", corrupt=None), None)
    assert [row["offset"] for row in rows] == offsets

    # start and end inside records: the records that start in [start, end)
    start, end = offsets[700] + 3, offsets[2500] - 1
    window, _ = source_rows(tmp_path, partition_bytes="30000", start_offset=str(start),
                            end_offset=str(end))
    assert [row["offset"] for row in window] == offsets[701:2500]


def test_plans_contiguous_ranges_that_start_at_record_starts(tmp_path):
    offsets = write_archive(tmp_path, count=2000, segment_size=10**9)
    (segment,) = list_segments(tmp_path / "orders")
    planned = plan_topic(tmp_path, "orders", 0, None, partition_bytes=25_000)
    assert len(planned) > 4
    assert planned[0].begin == 0 and planned[-1].end is None
    for before, after in zip(planned, planned[1:], strict=False):
        assert before.end == after.begin and after.begin in offsets
        assert after.begin - before.begin >= 25_000
    (segment.path.with_suffix(".idx")).write_bytes(b"\x00" * 7)  # torn: not trusted
    assert len(plan_topic(tmp_path, "orders", 0, None, partition_bytes=25_000)) == 1


def test_damaged_records_read_the_exact_way_from_there_on(tmp_path):
    offsets = write_archive(tmp_path, count=900)
    damage_metadata(tmp_path, "orders", offsets[400])
    rows, _ = source_rows(tmp_path, columnNameOfCorruptRecord=CORRUPT,
                          partition_bytes="5000")
    assert rows == as_table(exact_rows(tmp_path, "orders"), CORRUPT)
    assert sum(1 for row in rows if row[CORRUPT]) == 1 and len(rows) == 900


def metadata_of(n: int, **changes: object) -> dict[str, object]:
    fields = json.loads(message(n).frames()[1])
    fields.update(changes)
    return fields


# Metadata Arrow's JSON reader must not read otherwise than Python's json: each is
# read the exact way (or is damage), and the rows stay the exact reader's.
UNUSUAL = [
    json.dumps(dict(reversed(list(metadata_of(1).items())))).encode(),  # other key order
    json.dumps(metadata_of(2), indent=1).encode(),  # line breaks inside the object
    json.dumps({k: v for k, v in metadata_of(3).items() if k != "outcome"}).encode(),
    json.dumps(metadata_of(4, msg_id="caf\u00e9")).encode(),  # a msg_id beyond ASCII
    b'{"topic":"orders","topic":"orders",' + json.dumps(metadata_of(5))[1:].encode(),
    json.dumps(metadata_of(6, stored_us=1.0)).encode(),  # not an integer: damage
    json.dumps(metadata_of(7, deliveries=True)).encode(),  # not an integer: damage
    json.dumps(metadata_of(8, origin=None)).encode(),  # null: damage
    json.dumps(metadata_of(9, groups=["a", "b"], extra={"deep": [1, 2]})).encode(),
    b"\xef\xbb\xbf" + json.dumps(metadata_of(10)).encode(),  # a UTF-8 byte order mark
    json.dumps(metadata_of(11)).encode() + b" " + json.dumps(metadata_of(12)).encode(),
    b"",  # no metadata: damage
]


@pytest.mark.parametrize("unusual", UNUSUAL)
def test_unusual_metadata_gives_the_exact_readers_rows(tmp_path, unusual):
    write_archive(tmp_path, count=50)
    last = list_segments(tmp_path / "orders")[-1]
    records = [encode_record(message(100 + n).frames()) for n in range(5)]
    odd = encode_record([b"odd-key", unusual, b"p" * 255, b"q" * 256])
    with last.path.open("ab") as handle:
        handle.write(b"".join(records[:2]) + odd + b"".join(records[2:]))
    rows, _ = source_rows(tmp_path, columnNameOfCorruptRecord=CORRUPT)
    assert rows == as_table(exact_rows(tmp_path, "orders"), CORRUPT)
    assert len(rows) == 56


def test_raw_topics_and_torn_tails_read_as_before(tmp_path):
    archive = Archive(tmp_path, segment_size=30_000)
    archive.open(now=0)
    for first in range(0, 600, 50):
        archive.append_raw("zper", [[b"%08d" % n, b"v" * (n % 300)]
                                    for n in range(first, first + 50)], now=0)
    for n in range(40):
        archive.append(message(n), now=0)
    archive.close(now=0)
    with list_segments(tmp_path / "orders")[-1].path.open("ab") as handle:
        handle.write(encode_record(message(99).frames())[:-3])  # a write in progress
    for topic in ("zper", "orders"):
        rows, _ = source_rows(tmp_path, topics=topic, partition_bytes="8000")
        assert rows == as_table(exact_rows(tmp_path, topic, corrupt=None), None)
    assert len(source_rows(tmp_path, topics="zper")[0]) == 600


def test_a_frame_run_stops_before_the_first_record_that_does_not_parse():
    whole = [encode_record([b"k%d" % n, b"{}", b"x" * (n * 100)]) for n in range(4)]
    data = b"".join(whole)
    run = frame_run(data, 0, len(data), 100, 1 << 20, raw=False)
    assert (run.starts[-1], run.end, run.broken) == (len(data) - len(whole[3]), len(data),
                                                     False)
    assert run.parts == [b"", b"x" * 100, b"x" * 200, b"x" * 300]  # 300: a long frame
    cut = len(data) - len(whole[3])
    for bad, stop in ((data[:-1], cut), (data + b"\x07", len(data)),
                      (data + encode_record([b"key only"]), len(data))):
        run = frame_run(bad, 0, len(bad), 100, 1 << 20, raw=False)
        assert run.broken and run.end == stop and len(run.parts) == sum(run.part_counts)
    limited = frame_run(data, 0, len(data), 2, 1 << 20, raw=True)
    assert (len(limited.starts), limited.broken) == (2, False)
    assert limited.parts[:3] == [b"k0", b"{}", b""]  # raw: every frame is a part
