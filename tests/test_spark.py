"""The zper Spark data source and the report job, on a real local Spark session."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from pzq.archive.codec import encode_record
from pzq.archive.entry import ArchivedMessage
from pzq.archive.topiclog import list_segments
from pzq.archive.writer import Archive

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
ROOT = Path(__file__).parent.parent
HOUR_US = 3_600_000_000


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need pzq too
    from pzq.spark import ZperDataSource

    session = (SparkSession.builder.master("local[2]").appName("pzq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.dataSource.register(ZperDataSource)
    yield session
    session.stop()


def message(n: int, topic: str, acked_us: int, deliveries: int = 1) -> ArchivedMessage:
    return ArchivedMessage(b"0a0b0c0d-%016x" % n, b"m%d" % n, topic, acked_us - 5000 * n,
                           acked_us - 1000, acked_us, deliveries, "0a0b0c0d",
                           (b"p" * 50, b"q" * 10))


@pytest.fixture(scope="module")
def archive_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("archive")
    archive = Archive(directory, segment_size=1000)
    start = 1_700_000_000_000_000
    for n in range(30):
        archive.append(message(n, "orders", start + (n // 10) * HOUR_US, 1 + n % 3), now=0)
    for n in range(5):
        archive.append(message(100 + n, "audit", start), now=0)
    archive.close(now=0)
    last = list_segments(directory / "orders")[-1]
    torn = encode_record(message(999, "orders", start).frames())[:-7]
    with last.path.open("ab") as handle:
        handle.write(torn)  # a crash in the middle of a record
    return directory


def test_reads_typed_rows_one_partition_per_segment(spark, archive_dir):
    frame = spark.read.format("zper").load(str(archive_dir))
    assert dict(frame.dtypes) == {
        "topic": "string", "offset": "bigint", "key": "binary", "msg_id": "binary",
        "stored_us": "bigint", "first_delivered_us": "bigint", "acked_us": "bigint",
        "deliveries": "int", "origin": "string", "parts": "array<binary>",
        "outcome": "string"}
    segments = sum(len(list_segments(archive_dir / t)) for t in ("orders", "audit"))
    assert frame.rdd.getNumPartitions() == segments > 2
    rows = frame.collect()
    assert len(rows) == 35  # the torn record is skipped
    first = min((r for r in rows if r.topic == "orders"), key=lambda r: r.offset)
    assert (first.offset, bytes(first.msg_id), first.parts[1]) == (0, b"m0", b"q" * 10)


def test_topic_and_offset_options(spark, archive_dir):
    audit = spark.read.format("zper").option("topics", "audit").load(str(archive_dir))
    assert {r.topic for r in audit.collect()} == {"audit"}
    offsets = sorted(r.offset for r in spark.read.format("zper").option("topics", "orders")
                     .load(str(archive_dir)).collect())
    window = (spark.read.format("zper").option("topics", "orders")
              .option("start_offset", str(offsets[5])).option("end_offset", str(offsets[9]))
              .load(str(archive_dir)).collect())
    assert sorted(r.offset for r in window) == offsets[5:9]


def test_spark_agrees_with_the_python_reader_on_a_real_run(spark, start_node, context,
                                                          tmp_path):
    from pzq.archive.files import read_topic
    from pzq.client import Consumer, Producer

    archive = tmp_path / "archive"
    node = start_node("--archive-dir", str(archive), "--segment-size", "2000")
    with Producer(node.receive_dsn, context=context) as producer:
        for i in range(60):
            producer.send([b"body %d" % i, b"x" * i], headers=[b"TOPIC:t%d" % (i % 2)])
        producer.flush(15)
    given_back: set[int] = set()
    acked: set[int] = set()
    with Consumer(node.send_dsn, context=context) as consumer:
        while len(acked) < 60:  # every tenth given back once, so delivered twice
            message = consumer.receive(10)
            index = int(message.parts[0].split()[1])
            if index % 10 == 0 and index not in given_back:
                given_back.add(index)
                message.nack()
            else:
                acked.add(index)
                message.ack()
    node.wait_stats(lambda s: s["archive"]["archived"] == 60, message="archived")
    node.stop()  # flushed and closed
    expected = sorted((topic, offset, bytes(m.key), m.deliveries, tuple(m.parts))
                      for topic in ("t0", "t1") for offset, m in read_topic(archive, topic))
    rows = spark.read.format("zper").load(str(archive)).collect()
    got = sorted((r.topic, r.offset, bytes(r.key), r.deliveries,
                  tuple(bytes(p) for p in r.parts)) for r in rows)
    assert got == expected and len(got) == 60
    assert sum(1 for row in got if row[3] == 2) == 6


def test_report_job_end_to_end(archive_dir, tmp_path, capsys, spark):
    spec = importlib.util.spec_from_file_location("archive_report",
                                                  ROOT / "scripts" / "archive_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    rows = report.build_report(spark, str(archive_dir)).collect()
    orders = [r for r in rows if r.topic == "orders"]
    assert [r.messages for r in orders] == [10, 10, 10]  # three hours
    assert sum(r.redeliveries for r in orders) == sum(n % 3 for n in range(30))
    assert all(r.latency_p50_ms <= r.latency_p99_ms for r in orders)
    assert orders[0].bytes == 10 * 60

    spark.stop()  # the job starts its own session, as it would from the command line
    assert report.main(["--archive", str(archive_dir), "--out", str(tmp_path / "out"),
                        "--master", "local[2]"]) == 0
    printed = capsys.readouterr().out
    assert "orders" in printed and "latency_p99_ms" in printed
    assert (tmp_path / "out" / "report.parquet").is_dir()
    assert (tmp_path / "out" / "report.png").stat().st_size > 10_000
