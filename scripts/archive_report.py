#!/usr/bin/env python3
"""Report on a pzq archive with Spark: per topic and hour, messages, bytes, end-to-end
latency (stored -> acked) percentiles and redeliveries.

    scripts/archive_report.py --archive ARCHIVE_DIR --out REPORT_DIR [--master local[*]]

Writes REPORT_DIR/report.parquet and REPORT_DIR/report.png and prints the table.
Against a Spark cluster: --master spark://host:7077 with the archive on storage
every executor can read, and pzq installed on the executors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def build_report(spark, archive: str):  # noqa: ANN001, ANN201 - Spark types
    from pyspark.sql import functions as F

    # Dead letters were never acked: they have no end-to-end latency to report.
    messages = spark.read.format("zper").load(archive).where(F.col("outcome") == "acked")
    bytes_per_message = F.aggregate("parts", F.lit(0).cast("long"),
                                    lambda total, part: total + F.length(part))
    latency_ms = (F.col("acked_us") - F.col("stored_us")) / 1000.0
    return (messages
            .withColumn("hour", F.date_trunc("hour", F.timestamp_micros("acked_us")))
            .withColumn("bytes", bytes_per_message)
            .withColumn("latency_ms", latency_ms)
            .groupBy("topic", "hour")
            .agg(F.count("*").alias("messages"),
                 F.sum("bytes").alias("bytes"),
                 F.percentile_approx("latency_ms", 0.5).alias("latency_p50_ms"),
                 F.percentile_approx("latency_ms", 0.95).alias("latency_p95_ms"),
                 F.percentile_approx("latency_ms", 0.99).alias("latency_p99_ms"),
                 F.sum(F.col("deliveries") - 1).alias("redeliveries"),
                 F.sum((F.col("deliveries") > 1).cast("int")).alias("redelivered_messages"))
            .orderBy("topic", "hour"))


def draw_chart(rows, path: Path) -> None:  # noqa: ANN001 - pandas frame
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (volume, latency) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for topic, group in rows.groupby("topic"):
        volume.plot(group["hour"], group["messages"], marker="o", label=topic)
        latency.plot(group["hour"], group["latency_p99_ms"], marker="o", label=f"{topic} p99")
        latency.plot(group["hour"], group["latency_p50_ms"], linestyle="--",
                     label=f"{topic} p50")
    volume.set_ylabel("messages acked per hour")
    volume.set_title("pzq archive: messages and end-to-end latency by topic")
    volume.legend()
    latency.set_ylabel("stored -> acked latency (ms)")
    latency.set_xlabel("hour (UTC)")
    latency.legend()
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="archive_report", description=__doc__.splitlines()[0])
    parser.add_argument("--archive", required=True, help="the node's --archive-dir")
    parser.add_argument("--out", required=True, type=Path, help="directory for the report")
    parser.add_argument("--master", default="local[*]", help="Spark master URL")
    args = parser.parse_args(argv)
    if not Path(args.archive).is_dir():
        parser.error(f"{args.archive} is not a directory")

    from pyspark.sql import SparkSession

    from pzq.spark import session

    running = SparkSession.getActiveSession()  # a caller's session: theirs to stop
    spark = session("pzq-archive-report", args.master, {
        "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4"})
    try:
        report = build_report(spark, args.archive)
        args.out.mkdir(parents=True, exist_ok=True)
        report.write.mode("overwrite").parquet(str(args.out / "report.parquet"))
        rows = report.toPandas()
    finally:
        if running is None:
            spark.stop()
    if not len(rows):
        print(f"the archive holds no acked messages: {args.out / 'report.parquet'} is "
              "empty and no chart is drawn")
        return 0
    print(rows.to_string(index=False))
    draw_chart(rows, args.out / "report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
