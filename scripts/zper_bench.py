#!/usr/bin/env python3
"""Benchmark of the archive as a ZPER broker, every figure beside its baseline of the
same run (see docs/performance.rst).

    scripts/zper_bench.py [--count N] [--spark-rows N] [--stream-seconds S]
                          [--no-spark | --spark-only]
                          [--fetch-only MB] [--json FILE]

ZPWriter mode 0 and mode 1 at 100 B and 4 KiB (messages/s, MB/s) against the echo
ceiling and against dd writing the same bytes; FETCH MB/s against reading the
same files and against the FETCH ceiling (ZeroMQ answering from memory); Spark
batch rows/s against Parquet; streaming write-to-row p50/p99.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.archive import Archive
from pzq.bench import zper as bench
from pzq.bench.nodes import NodeProcess, wait_until
from pzq.bench.options import output_file, positive
from pzq.bench.run_line import run_line
from pzq.tool_base import quiet_on_interrupt

SIZES = (100, 4096)


def start_node(directory: Path) -> tuple[NodeProcess, dict[str, str]]:
    node = NodeProcess(directory / "db", "--archive-dir", str(directory / "archive"),
                       "--archive-dsn", "tcp://127.0.0.1:*",
                       "--zper-writer-dsn", "tcp://127.0.0.1:*",
                       "--flush-interval", "100").start()
    ready = node.event("node_ready")
    assert ready is not None
    return node, ready


def writer_figures(directory: Path, count: int) -> list[dict[str, Any]]:
    node, ready = start_node(directory)
    rows = []
    try:
        # A first run is slower (the node and the load generator warm up): not counted.
        bench.measure_writer(node, ready["zper_writer"], "warmup", 0, count // 5, SIZES[0])
        for size in SIZES:
            n = count if size < 1000 else max(1000, count // 4)
            for mode in (0, 1):
                topic = f"m{mode}s{size}"
                seconds = bench.measure_writer(node, ready["zper_writer"], topic, mode, n, size)
                ceiling = bench.measure_ceiling(mode, n, size)
                written = node.stats()["archive"]["topics"][topic]["bytes"]
                dd = bench.dd_seconds(directory, written)
                rows.append({"what": f"ZPWriter mode {mode}, {size} B", "messages": n,
                             "msg_per_s": n / seconds, "mb_per_s": written / seconds / bench.MB,
                             "ceiling_msg_per_s": n / ceiling,
                             "vs_ceiling": ceiling / seconds,
                             "dd_mb_per_s": written / dd / bench.MB, "vs_dd": dd / seconds})
        rows.append(fetch_row(node, directory, ready["archive"], f"m0s{SIZES[-1]}"))
    finally:
        node.stop()
    return rows


def fetch_row(node: NodeProcess, directory: Path, dsn: str, topic: str) -> dict[str, Any]:
    """FETCH of a whole topic against reading its files, twice each: the first
    FETCH of a record walks it (unless the node wrote it), the second need not. Once
    the node's fsync made the whole topic durable: a FETCH hands out no more."""
    end = sum(path.stat().st_size for path in (directory / "archive" / topic).glob("*.dat"))
    wait_until(lambda: node.stats()["archive"]["topics"][topic]["flushed_offset"] >= end,
               message=f"{topic}'s fsync")
    first, again = (bench.fetch_seconds(dsn, topic, end) for _ in range(2))
    files = min(bench.file_read_seconds(directory / "archive" / topic) for _ in range(2))
    ceiling = bench.fetch_ceiling_seconds(end)
    return {"what": "FETCH, 1 MiB at a time", "bytes": end,
            "first_mb_per_s": end / first / bench.MB, "mb_per_s": end / again / bench.MB,
            "files_mb_per_s": end / files / bench.MB, "first_vs_files": files / first,
            "vs_files": files / again, "ceiling_mb_per_s": end / ceiling / bench.MB,
            "vs_ceiling": ceiling / again}


def fetch_figures(directory: Path, megabytes: int) -> list[dict[str, Any]]:
    """FETCH alone: a topic of 4 KiB ZPER records written before the node starts
    (so the node walks each record on its first FETCH), then read by FETCH."""
    archive = Archive(directory / "archive")
    archive.open(now=0)
    body = b"x" * SIZES[-1]
    count = megabytes * 1_000_000 // (SIZES[-1] + 20)
    for first in range(0, count, 1000):
        archive.append_raw("fetch", [[bench.ID.pack(n), body]
                                     for n in range(first, min(count, first + 1000))], now=0)
    archive.close(now=0)
    node, ready = start_node(directory)
    try:
        return [fetch_row(node, directory, ready["archive"], "fetch")]
    finally:
        node.stop()


def spark_figures(directory: Path, rows_wanted: int,
                  stream_seconds: float) -> list[dict[str, Any]]:
    from pzq.spark import session

    spark = session("zper-bench", "local[2]", {"spark.ui.enabled": "false",
                                                "spark.sql.shuffle.partitions": "2"})
    try:
        archive = Archive(directory / "spark-archive", segment_size=64 << 20)
        archive.open(now=0)
        for n in range(rows_wanted):
            archive.append(ArchivedMessage(b"k%015d" % n, b"m%d" % n, "orders", n, n + 1, n + 2,
                                           1, "bench", (b"x" * 100,)), now=0)
        archive.close(now=0)
        zper_rate, parquet_rate, rows = bench.spark_rows_per_second(
            spark, directory / "spark-archive", directory / "rows.parquet")
        figures = [{"what": "Spark batch read (every column)", "rows": rows,
                    "rows_per_s": zper_rate, "parquet_rows_per_s": parquet_rate,
                    "vs_parquet": zper_rate / parquet_rate}]
        node, ready = start_node(directory / "stream")
        try:
            latencies = bench.stream_latencies_ms(
                spark, directory / "stream" / "archive", directory / "checkpoint",
                ready["zper_writer"], "live", rate=200, seconds=stream_seconds)
        finally:
            node.stop()
        p50, p99 = bench.quantiles(latencies)
        figures.append({"what": "streaming, write to row in the sink", "rows": len(latencies),
                        "p50_ms": p50, "p99_ms": p99})
        return figures
    finally:
        spark.stop()


def print_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        shown = ", ".join(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}"
                          for key, value in row.items() if key != "what")
        print(f"{row['what']}: {shown}")


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zper_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=positive(int), default=100_000,
                        help="messages of 100 B per run (4 KiB runs send a quarter; "
                        "default: 100000)")
    parser.add_argument("--spark-rows", type=positive(int), default=200_000,
                        help="rows in the Spark reads (default: 200000)")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--spark-only", action="store_true",
                        help="only the Spark batch read and the streaming latency")
    parser.add_argument("--fetch-only", type=positive(int), metavar="MB",
                        help="only FETCH, of a topic of MB megabytes written before the "
                        "node starts")
    parser.add_argument("--stream-seconds", type=positive(float), default=15.0,
                        help="how long the streaming latency is measured (default: 15)")
    parser.add_argument("--json", type=output_file)
    args = parser.parse_args(argv)
    print(run_line(datetime.now(UTC)), flush=True)
    with tempfile.TemporaryDirectory(prefix="zper-bench-", dir=".") as work:
        rows = ([] if args.spark_only
                else fetch_figures(Path(work), args.fetch_only) if args.fetch_only
                else writer_figures(Path(work), args.count))
        print_rows(rows)
        if not args.no_spark and not args.fetch_only:
            spark_rows = spark_figures(Path(work), args.spark_rows, args.stream_seconds)
            print_rows(spark_rows)
            rows += spark_rows
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":  # load generators are spawned processes that import this file
    sys.exit(main())
