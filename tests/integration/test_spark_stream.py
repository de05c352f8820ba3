"""Spark reading the archive as a stream, and raw ZPER topics, on a real local session."""

from __future__ import annotations

import json

import pytest
import zmq

from pzq.archive.tier.archive import Archive
from pzq.protocol import zper as zp
from tests.support.archive_damage import message
from tests.support.scripts import load_script

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(scope="module")
def spark():
    from pzq.spark import session

    spark = session("pzq-stream-tests", "local[2]", {"spark.ui.enabled": "false",
                                                     "spark.sql.shuffle.partitions": "2"})
    yield spark
    spark.stop()


def append(directory, first: int, count: int) -> None:
    """pzq records in ``orders`` and raw ZPER records in ``clicks``, small segments."""
    archive = Archive(directory, segment_size=3000)
    archive.open(now=0)
    for n in range(first, first + count):
        archive.append(message(n), now=0)
        archive.append_raw("clicks", [[b"click-%d" % n, b"x" * (n % 50)]], now=0)
    archive.close(now=0)


def run_to_end(spark, directory, out, checkpoint, **options: str) -> None:
    query = (spark.readStream.format("zper").options(**options).load(str(directory))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_a_stream_restarted_from_its_checkpoint_has_no_gap_and_no_duplicate(spark,
                                                                           tmp_path):
    archive, out, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ck"
    append(archive, 0, 60)
    run_to_end(spark, archive, out, checkpoint)
    first = spark.read.parquet(str(out)).count()
    assert first == 120
    append(archive, 60, 90)  # new records, and new segments, while it is stopped
    run_to_end(spark, archive, out, checkpoint)
    streamed = spark.read.parquet(str(out))
    batch = spark.read.format("zper").load(str(archive))
    keys = ["topic", "offset"]
    assert streamed.count() == streamed.select(*keys).distinct().count() == 300
    assert sorted(map(tuple, streamed.select(*keys).collect())) == \
        sorted(map(tuple, batch.select(*keys).collect()))
    clicks = streamed.where("topic = 'clicks'").orderBy("offset").collect()
    assert [list(row.parts) for row in clicks] == \
        [[b"click-%d" % n, b"x" * (n % 50)] for n in range(150)]
    assert all(row.key is None and row.acked_us is None for row in clicks)


def test_a_stream_over_two_directories_reads_what_either_appends(spark, tmp_path):
    first, second = tmp_path / "a" / "archive", tmp_path / "b" / "archive"
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    append(first, 0, 10)
    second.mkdir(parents=True)  # a node that has archived nothing yet
    query = (spark.readStream.format("zper").option("topics", "orders")
             .load(f"{first},{second}")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())

    def per_node() -> dict[str, int]:
        rows = spark.read.parquet(str(out)).groupBy("node").count().collect()
        return {row.node: row["count"] for row in rows}

    try:
        query.processAllAvailable()
        assert per_node() == {"a/archive": 10}
        append(second, 100, 7)
        query.processAllAvailable()
        assert per_node() == {"a/archive": 10, "b/archive": 7}
        append(first, 10, 3)
        query.processAllAvailable()
        assert per_node() == {"a/archive": 13, "b/archive": 7}
    finally:
        query.stop()
    offsets = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    last = offsets[-1].read_text().splitlines()[-1]
    assert set(json.loads(last)) == {str(first), str(second)}  # offsets per directory
    streamed = spark.read.parquet(str(out)).where("node = 'b/archive'").collect()
    assert sorted(row.msg_id for row in streamed) == sorted(b"m%d" % n for n in range(100, 107))


def test_records_retention_deleted_before_the_stream_read_them_fail_the_query(spark,
                                                                            tmp_path):
    from pyspark.errors import StreamingQueryException

    from pzq.archive.format.segments import list_segments

    archive, out, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ck"
    append(archive, 0, 10)
    run_to_end(spark, archive, out, checkpoint)
    append(archive, 10, 40)  # then retention deletes the oldest, before the stream reads
    segments = list_segments(archive / "orders")
    for segment in segments[:-2]:
        segment.path.unlink()
    with pytest.raises(StreamingQueryException, match="records of topic orders in .* at "
                       "offsets [0-9]+ to [0-9]+ were deleted"):
        run_to_end(spark, archive, out, checkpoint)
    run_to_end(spark, archive, out, checkpoint, failOnDataLoss="false")
    rows = spark.read.parquet(str(out)).where("topic = 'orders'").collect()
    kept = [row for row in rows if row.offset >= segments[-2].start]
    assert len(rows) == 10 + len(kept) and len(kept) == len({row.offset for row in kept}) > 0


def test_latest_starts_after_what_is_there(spark, tmp_path):
    archive, out, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ck"
    append(archive, 0, 20)
    query = (spark.readStream.format("zper").option("startingOffsets", "latest")
             .option("topics", "orders").load(str(archive))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()
        append(archive, 20, 5)
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).orderBy("offset").collect()
    assert [row.msg_id for row in rows] == [b"m%d" % n for n in range(20, 25)]


def test_a_bad_starting_offsets_is_refused_at_load_in_pzq_s_words_alone(spark, tmp_path):
    from pyspark.errors import AnalysisException

    archive = tmp_path / "archive"
    append(archive, 0, 1)
    with pytest.raises(AnalysisException) as refused:
        spark.readStream.format("zper").option("startingOffsets", "newest").load(str(archive))
    assert "startingOffsets is earliest or latest, not 'newest'" in str(refused.value)
    assert "UnboundLocalError" not in str(refused.value)  # PySpark's, after a reader failed
    with pytest.raises(AnalysisException) as refused:
        spark.readStream.format("zper").option("failOnDataLoss", "no").load(str(archive))
    assert "failOnDataLoss is true or false, not 'no'" in str(refused.value)
    assert "UnboundLocalError" not in str(refused.value)
    # node over several directories: refused when the query started, its line followed
    # by PySpark's UnboundLocalError
    other = tmp_path / "other"
    append(other, 0, 1)
    with pytest.raises(AnalysisException) as refused:
        (spark.readStream.format("zper").option("node", "tcp://127.0.0.1:1")
         .load(f"{archive},{other}"))
    assert "node caps the stream of one archive directory, not of 2" in str(refused.value)
    assert "UnboundLocalError" not in str(refused.value)


def test_a_zper_producer_s_messages_read_back_by_spark(spark, start_node, tmp_path,
                                                      context):
    node = start_node("--archive-dir", str(tmp_path / "archive"),
                      "--zper-writer-dsn", "tcp://127.0.0.1:*")
    writer = context.socket(zmq.REQ)
    try:
        writer.setsockopt(zmq.IDENTITY, zp.make_identity("trades", 2))
        writer.connect(node.event("node_ready")["zper_writer"])
        sent = [[b"trade-%d" % n, b"%d" % (n * 7)] for n in range(25)]
        for frames in sent:
            writer.send_multipart(frames)
            assert writer.poll(10_000) and writer.recv_multipart() == [frames[0]]
    finally:
        writer.close(linger=0)
    rows = (spark.read.format("zper").option("topics", "trades").load(str(tmp_path / "archive"))
            .orderBy("offset").collect())
    assert [list(row.parts) for row in rows] == sent
    assert {row.topic for row in rows} == {"trades"} and rows[0].msg_id is None


def test_a_stream_capped_by_a_node_with_curve_asks_it_with_the_keys_given(
        spark, start_node, tmp_path, context, curve_keys):
    from pzq.client import Consumer, Producer

    archive, out, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ck"
    node = start_node(*curve_keys["args"], "--archive-dir", str(archive),
                      "--flush-interval", "50")
    node.curve = curve = curve_keys["client"]
    with Producer(node.receive_dsn, context=context, curve=curve) as producer:
        for i in range(5):
            producer.send([b"secret %d" % i], headers=[b"TOPIC:orders"])
        producer.flush(15)
    with Consumer(node.send_dsn, context=context, curve=curve) as consumer:
        for _ in range(5):
            consumer.receive(10).ack()
    node.wait_stats(lambda s: s["archive"]["archived"] == 5, message="archived")
    node.wait_archive_durable()
    files = curve_keys["files"]
    query = (spark.readStream.format("zper").option("node", node.monitor_dsn)
             .option("curve_client_key", files["client"])
             .option("curve_server_key", files["node"]).load(str(archive))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(row.parts[0] for row in rows) == [b"secret %d" % i for i in range(5)]


def report_job():
    return load_script("archive_report")


def test_stream_report_stays_current_across_runs(spark, tmp_path, capsys):
    from tests.support.archive_damage import START_US
    from tests.support.archive_damage import message as acked

    def archive_messages(numbers: range) -> None:
        store = Archive(tmp_path / "archive", segment_size=3000)
        store.open(now=0)
        for n in numbers:  # one every 6 s
            store.append(acked(n, acked_us=START_US + n * 6_000_000), now=0)
        store.close(now=0)

    out = tmp_path / "out"
    common = ["--stream", "--once", "--archive", str(tmp_path / "archive"), "--out", str(out),
              "--master", "local[2]", "--trigger", "0.1"]
    report = report_job()
    archive_messages(range(30))
    assert report.main([*common, "--sink", "console"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "-- update 0" and "latency_p99_ms" in printed[1]
    assert sum(int(line.split()[3]) for line in printed[2:]) == 30  # messages column
    archive_messages(range(30, 36))
    # From its checkpoint: the new records only, added to the running report, which
    # the Parquet sink writes whole.
    assert report.main([*common, "--sink", "parquet"]) == 0
    rows = spark.read.parquet(str(out / "report-stream.parquet")).orderBy("minute").collect()
    minutes = [(START_US + n * 6_000_000) // 60_000_000 for n in range(36)]
    assert [row.messages for row in rows] == [minutes.count(m) for m in sorted(set(minutes))]
    assert len(rows) == 4 and sum(row.messages for row in rows) == 36
    assert all(row.latency_p50_ms <= row.latency_p99_ms for row in rows)
