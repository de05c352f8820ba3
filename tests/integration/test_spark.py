"""The zper Spark data source and the report job, on a real local Spark session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pzq.archive.format.codec import encode_record
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import list_segments
from pzq.curve_probe import CLIENT_KEY_REFUSED
from tests.support.archive_damage import damage_metadata, segment_of, write_archive
from tests.support.scripts import load_script

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
ROOT = Path(__file__).parents[2]
HOUR_US = 3_600_000_000
HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


@pytest.fixture(scope="module")
def spark():
    from pzq.spark import session

    spark = session("pzq-tests", "local[2]", {"spark.ui.enabled": "false",
                                              "spark.sql.shuffle.partitions": "2"})
    yield spark
    spark.stop()


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
        "outcome": "string", "node": "string"}
    segments = sum(len(list_segments(archive_dir / t)) for t in ("orders", "audit"))
    assert frame.rdd.getNumPartitions() == segments > 2
    rows = frame.collect()
    assert len(rows) == 35  # the torn record is skipped
    first = min((r for r in rows if r.topic == "orders"), key=lambda r: r.offset)
    assert (first.offset, bytes(first.msg_id), first.parts[1]) == (0, b"m0", b"q" * 10)


def test_a_large_segment_is_read_by_partitions_cut_at_its_index(spark, tmp_path):
    offsets = write_archive(tmp_path, count=3000, segment_size=10**9)
    assert len(list_segments(tmp_path / "orders")) == 1
    whole = spark.read.format("zper").load(str(tmp_path))
    cut = spark.read.format("zper").option("partition_bytes", "20000").load(str(tmp_path))
    assert whole.rdd.getNumPartitions() == 1 and cut.rdd.getNumPartitions() > 5
    rows = sorted(cut.collect(), key=lambda row: row.offset)
    assert rows == sorted(whole.collect(), key=lambda row: row.offset)
    assert [row.offset for row in rows] == offsets


@pytest.fixture(scope="module")
def damaged_archive(tmp_path_factory) -> tuple[Path, list[int], int]:
    """900 messages; three bytes inside record 400's metadata changed."""
    directory = tmp_path_factory.mktemp("damaged")
    offsets = write_archive(directory)
    return directory, offsets, damage_metadata(directory, "orders", offsets[400])


def test_permissive_skips_a_damaged_record_and_shows_it_on_request(spark, damaged_archive):
    directory, offsets, changed = damaged_archive
    rows = spark.read.format("zper").load(str(directory)).collect()
    assert sorted(r.offset for r in rows) == offsets[:400] + offsets[401:]  # 899 of 900

    frame = (spark.read.format("zper").option("columnNameOfCorruptRecord", "_corrupt_record")
             .load(str(directory)))
    damaged = frame.where(frame._corrupt_record.isNotNull()).collect()
    assert frame.count() == 900 and len(damaged) == 1
    (row,) = damaged
    segment = segment_of(directory, "orders", changed).path.name
    assert (row.topic, row.offset, row.key, row.parts) == ("orders", offsets[400], None, None)
    assert f"segment {segment}, offset {offsets[400]}: record metadata" in row._corrupt_record
    assert frame.where(frame._corrupt_record.isNull()).count() == 899


def test_failfast_stops_at_the_damaged_record_naming_it(spark, damaged_archive):
    from pyspark.errors import PythonException

    directory, offsets, changed = damaged_archive
    segment = segment_of(directory, "orders", changed).path.name
    with pytest.raises(PythonException) as raised:
        spark.read.format("zper").option("mode", "FAILFAST").load(str(directory)).collect()
    assert (f"DamagedRecordError: damaged record in topic orders, segment {segment}, "
            f"offset {offsets[400]}") in str(raised.value)


def test_bad_options_are_refused_before_reading(spark, archive_dir):
    from pyspark.errors import PySparkException

    for name, value, words in (("mode", "LENIENT", "mode is PERMISSIVE or FAILFAST"),
                               ("start_offset", "-5", "an offset is a byte position"),
                               ("partition_bytes", "0", "partition_bytes is a number"),
                               ("columnNameOfCorruptRecord", "key", "must be a new column")):
        with pytest.raises(PySparkException, match=words):
            spark.read.format("zper").option(name, value).load(str(archive_dir)).collect()


def test_the_source_s_error_is_one_line_when_tracebacks_are_hidden(spark, tmp_path):
    """What the Spark page says of the source's errors: Spark wraps them in the Python
    worker's traceback, and hideTraceback leaves pzq's line alone."""
    from pyspark.errors import PySparkException

    missing = tmp_path / "nowhere"
    line = f"the archive directory {missing} does not exist"
    with pytest.raises(PySparkException) as wrapped:
        spark.read.format("zper").load(str(missing))
    assert "Traceback (most recent call last)" in str(wrapped.value)
    assert f"ValueError: {line}" in str(wrapped.value)
    spark.conf.set(HIDE_TRACEBACK, "true")
    try:
        with pytest.raises(PySparkException) as hidden:
            spark.read.format("zper").load(str(missing))
    finally:
        spark.conf.unset(HIDE_TRACEBACK)
    assert "Traceback" not in str(hidden.value)
    assert str(hidden.value).splitlines()[0].endswith(f": ValueError: {line}")


def test_an_empty_archive_or_an_unknown_topic_reads_zero_rows(spark, archive_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert spark.read.format("zper").load(str(empty)).collect() == []
    (empty / "orders").mkdir()  # a topic whose first segment is not written yet
    assert spark.read.format("zper").load(str(empty)).count() == 0
    unknown = spark.read.format("zper").option("topics", "nope").load(str(archive_dir))
    assert unknown.collect() == [] and len(unknown.columns) == 12


def test_topic_and_offset_options(spark, archive_dir):
    audit = spark.read.format("zper").option("topics", "audit").load(str(archive_dir))
    assert {r.topic for r in audit.collect()} == {"audit"}
    offsets = sorted(r.offset for r in spark.read.format("zper").option("topics", "orders")
                     .load(str(archive_dir)).collect())
    window = (spark.read.format("zper").option("topics", "orders")
              .option("start_offset", str(offsets[5])).option("end_offset", str(offsets[9]))
              .load(str(archive_dir)).collect())
    assert sorted(r.offset for r in window) == offsets[5:9]
    # the records that start in the range: inside a record is from the next one on,
    # past the end is no row (what the Spark page says)
    inside = (spark.read.format("zper").option("topics", "orders")
              .option("start_offset", str(offsets[5] + 1)).option("end_offset", str(offsets[9]))
              .load(str(archive_dir)).collect())
    assert sorted(r.offset for r in inside) == offsets[6:9]
    past = (spark.read.format("zper").option("topics", "orders")
            .option("start_offset", str(10**9)).load(str(archive_dir)))
    assert past.count() == 0


def test_spark_agrees_with_the_python_reader_on_a_real_run(spark, start_node, context,
                                                          tmp_path):
    from pzq.archive.format.files import read_topic
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


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> tuple[Path, Path]:
    """Two nodes' archives, each named ``archive``: 30 orders and 5 audit on the first,
    12 orders on the second."""
    root = tmp_path_factory.mktemp("cluster")
    first, second = root / "node-a" / "archive", root / "node-b" / "archive"
    for directory, counts in ((first, {"orders": 30, "audit": 5}), (second, {"orders": 12})):
        archive = Archive(directory, segment_size=1000)
        for topic, count in counts.items():
            for n in range(count):
                archive.append(message(n, topic, 1_700_000_000_000_000), now=0)
        archive.close(now=0)
    return first, second


def test_several_directories_read_as_one_table_with_each_row_s_node(spark, two_nodes):
    first, second = two_nodes
    frame = spark.read.format("zper").load([str(first), str(second)])
    counts = {(r.node, r.topic): r["count"] for r in frame.groupBy("node", "topic").count()
              .collect()}
    assert counts == {("node-a/archive", "orders"): 30, ("node-a/archive", "audit"): 5,
                      ("node-b/archive", "orders"): 12}
    segments = sum(len(list_segments(d / t)) for d in two_nodes for t in ("orders", "audit")
                   if (d / t).is_dir())
    assert frame.rdd.getNumPartitions() == segments  # each directory's own segments
    orders = (spark.read.format("zper").option("topics", "orders")
              .load(f"{first},{second}").collect())
    assert sorted(r.node for r in orders) == ["node-a/archive"] * 30 + ["node-b/archive"] * 12
    assert {r.offset for r in orders if r.node == "node-b/archive"} <= \
        {r.offset for r in orders if r.node == "node-a/archive"}  # each log's own offsets


def test_a_missing_directory_is_one_error_naming_it(spark, two_nodes, tmp_path):
    from pyspark.errors import PySparkException

    missing = tmp_path / "node-c" / "archive"
    with pytest.raises(PySparkException) as raised:
        spark.read.format("zper").load([str(two_nodes[0]), str(missing)]).collect()
    assert f"the archive directory {missing} does not exist" in str(raised.value)


def test_monitor_finds_each_node_s_archive(spark, start_node, context, tmp_path):
    from pzq.client import Consumer, Producer

    sent = {}
    monitors = []
    for name, count in (("a", 7), ("b", 4)):
        node = start_node("--archive-dir", str(tmp_path / name / "archive"))
        with Producer(node.receive_dsn, context=context) as producer:
            for i in range(count):
                producer.send([b"%s %d" % (name.encode(), i)], headers=[b"TOPIC:orders"])
            producer.flush(15)
        with Consumer(node.send_dsn, context=context) as consumer:
            for _ in range(count):
                consumer.receive(10).ack()
        stats = node.wait_stats(lambda s, c=count: s["archive"]["archived"] == c,
                                message="archived")
        assert stats["archive"]["archive_dir"] == str(tmp_path / name / "archive")
        sent[stats["node_id"]] = count
        monitors.append(node.monitor_dsn)
    frame = spark.read.format("zper").option("monitor", ",".join(monitors)).load()
    counts = {row.node: row["count"] for row in frame.groupBy("node").count().collect()}
    assert counts == sent and len(counts) == 2


def test_monitor_asks_a_node_with_curve_with_the_keys_given(spark, start_node, context,
                                                          tmp_path, curve_keys):
    from pyspark.errors import PySparkException

    from pzq.client import Consumer, Producer

    node = start_node(*curve_keys["args"], "--archive-dir", str(tmp_path / "archive"))
    node.curve = curve = curve_keys["client"]
    with Producer(node.receive_dsn, context=context, curve=curve) as producer:
        for i in range(3):
            producer.send([b"secret %d" % i], headers=[b"TOPIC:orders"])
        producer.flush(15)
    with Consumer(node.send_dsn, context=context, curve=curve) as consumer:
        for _ in range(3):
            consumer.receive(10).ack()
    node.wait_stats(lambda s: s["archive"]["archived"] == 3, message="archived")
    files = curve_keys["files"]

    def read(client_key: str) -> list:
        return (spark.read.format("zper").option("monitor", node.monitor_dsn)
                .option("curve_client_key", client_key)
                .option("curve_server_key", files["node"]).load().collect())

    assert sorted(row.parts[0] for row in read(files["client"])) == [
        b"secret %d" % i for i in range(3)]
    with pytest.raises(PySparkException, match=re.escape(CLIENT_KEY_REFUSED)):
        read(files["stranger"])
    with pytest.raises(PySparkException, match="none.key_secret"):
        read(str(tmp_path / "none.key_secret"))


def docs_spark_snippet() -> str:
    section = (ROOT / "docs" / "archive.rst").read_text().split("\nSpark\n-----\n", 1)[1]
    lines = section.split(".. code-block:: python\n\n", 1)[1].splitlines()
    end = next(n for n, line in enumerate(lines) if line and not line.startswith("   "))
    return textwrap.dedent("\n".join(lines[:end]))


def test_docs_snippet_runs_from_a_venv_that_is_not_activated(damaged_archive, tmp_path):
    directory, offsets, changed = damaged_archive
    snippet = docs_spark_snippet()
    assert "/var/lib/pzq/archive" in snippet
    script = tmp_path / "job.py"
    script.write_text(snippet.replace("/var/lib/pzq/archive", str(directory))
                      + "\nprint('rows', orders.count())\n")
    venv_bin = Path(sys.executable).parent
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON",
                          "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "/usr/bin:/bin").split(
        os.pathsep) if Path(part).resolve() != venv_bin.resolve())
    assert shutil.which("python3", path=env["PATH"]) != sys.executable
    ran = subprocess.run([str(venv_bin / "python"), str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=240, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines()[-1] == "rows 899"
    warnings = [line for line in ran.stderr.splitlines() if "archive_record_damaged" in line]
    segment = segment_of(directory, "orders", changed).path.name
    assert len(warnings) == 1 and f"offset={offsets[400]}" in warnings[0]
    assert f"segment={segment}" in warnings[0] and "topic=orders" in warnings[0]


def report_job():
    return load_script("archive_report")


def test_report_on_an_empty_archive_is_an_empty_report(spark, tmp_path, capsys):
    (tmp_path / "archive").mkdir()
    out = tmp_path / "out"
    assert report_job().main(["--archive", str(tmp_path / "archive"), "--out", str(out),
                              "--master", "local[2]"]) == 0
    (note,) = capsys.readouterr().out.strip().splitlines()
    assert note.startswith("the archive holds no acked messages")
    assert spark.read.parquet(str(out / "report.parquet")).count() == 0
    assert not (out / "report.png").exists()


def test_report_job_end_to_end(archive_dir, tmp_path, capsys, spark):
    report = report_job()
    rows = report.build_report(spark, str(archive_dir)).collect()
    orders = [r for r in rows if r.topic == "orders"]
    assert [r.messages for r in orders] == [10, 10, 10]  # three hours
    assert sum(r.redeliveries for r in orders) == sum(n % 3 for n in range(30))
    assert all(r.latency_p50_ms <= r.latency_p99_ms for r in orders)
    assert orders[0].bytes == 10 * 60

    # The job takes the running session and leaves it running (from the command line
    # it starts its own: see the docs snippet test for a fresh process).
    assert report.main(["--archive", str(archive_dir), "--out", str(tmp_path / "out"),
                        "--master", "local[2]"]) == 0
    printed = capsys.readouterr().out
    assert "orders" in printed and "latency_p99_ms" in printed
    assert (tmp_path / "out" / "report.parquet").is_dir()
    assert (tmp_path / "out" / "report.png").stat().st_size > 10_000

    # Three busy minutes an hour apart: the idle minutes between them are drawn as
    # no messages and no latency, not as a line joining the busy ones.
    span = report.acked_span(spark, str(archive_dir))
    figure = report.make_figure(report.build_series(spark, str(archive_dir), span).toPandas(),
                                span)
    volume, latency, _ = figure.axes
    counts = {line.get_label(): line.get_ydata() for line in volume.get_lines()}["orders"]
    assert len(counts) > 100 and sum(counts) == 30 and list(counts).count(0) >= len(counts) - 3
    p99 = {line.get_label(): line.get_ydata() for line in latency.get_lines()}["orders p99"]
    assert sum(1 for value in p99 if value == value) == 3  # NaN elsewhere: gaps
    lone = {line.get_label(): line for line in latency.get_lines()}["orders p99"]
    assert lone.get_marker() not in ("None", "", None)  # three lone points stay visible


def varied_archive(directory: Path, span_s: int, every_s: int) -> tuple[int, int]:
    """Two topics over ``span_s`` seconds: latency that varies, some redeliveries.
    Returns the first and last acked time (µs)."""
    archive = Archive(directory, segment_size=1 << 20)
    start, n = 1_700_000_000_000_000, 0
    for second in range(0, span_s + 1, every_s):
        for topic, share in (("orders", 3), ("audit", 1)):
            for _ in range(share):
                n += 1
                acked = start + second * 1_000_000 + n % 997
                latency_us = 2000 + (n * 7919) % 30_000 + (400_000 if n % 50 == 0 else 0)
                archive.append(ArchivedMessage(
                    b"0a0b0c0d-%016x" % n, b"m%d" % n, topic, acked - latency_us,
                    acked - latency_us // 2, acked, 2 if n % 9 == 0 else 1, "0a0b0c0d",
                    (b"p" * 20,)), now=0)
    archive.close(now=0)
    return start, start + span_s * 1_000_000 + n % 997


@pytest.mark.parametrize("span_s, every_s, step", [(300, 1, "10 s"), (30 * 86400, 900, "6 h")],
                         ids=["five-minutes", "a-month"])
def test_report_chart_fits_the_data_span(spark, tmp_path, span_s, every_s, step):
    import matplotlib.dates as mdates

    report = report_job()
    first_us, last_us = varied_archive(tmp_path / "archive", span_s, every_s)
    span = report.acked_span(spark, str(tmp_path / "archive"))
    assert span.step_name == step
    series = report.build_series(spark, str(tmp_path / "archive"), span).toPandas()
    figure = report.make_figure(series, span)
    volume, latency, redelivered = figure.axes
    low, high = (mdates.num2date(x) for x in redelivered.get_xlim())
    assert abs(low.timestamp() - first_us / 1e6) <= span.step_s  # not years around it
    assert abs(high.timestamp() - last_us / 1e6) <= 2 * span.step_s
    colours: dict[str, set] = {}
    for axes in figure.axes:
        for line in axes.get_lines():
            colours.setdefault(line.get_label().split()[0], set()).add(line.get_color())
    assert set(colours) == {"orders", "audit"}
    assert all(len(found) == 1 for found in colours.values())  # one colour per topic
    assert colours["orders"] != colours["audit"]
    p50 = {line.get_label(): line for line in latency.get_lines()}["orders p50"]
    assert len(p50.get_xdata()) > 20 and p50.get_linestyle() == "--"
    busy = sum(1 for value in p50.get_ydata() if value == value)  # not NaN
    assert (p50.get_marker() not in ("None", "", None)) == (busy <= 40)
    redeliveries = {line.get_label(): line for line in redelivered.get_lines()}
    assert sum(redeliveries["orders redeliveries"].get_ydata()) > 0
    assert "redeliveries" in redelivered.get_ylabel() and "ms" in latency.get_ylabel()
    assert step in volume.get_ylabel()
    figure.savefig(tmp_path / f"chart-{span_s}.png", dpi=100)
