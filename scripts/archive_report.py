#!/usr/bin/env python3
"""Report on a pzq archive with Spark: per topic and hour, messages, bytes, end-to-end
latency (stored -> acked) percentiles and redeliveries.

    scripts/archive_report.py --archive ARCHIVE_DIR --out REPORT_DIR [--master local[*]]

Writes REPORT_DIR/report.parquet and REPORT_DIR/report.png and prints the table.

    scripts/archive_report.py --stream --archive ARCHIVE_DIR --out REPORT_DIR
        [--sink console|parquet] [--trigger SECONDS] [--once]

keeps a report per topic and minute current as messages are archived: Spark
Structured Streaming over the archive, checkpointed in REPORT_DIR/checkpoint (a
restart goes on where it stopped), each update printed (console) or written over
REPORT_DIR/report-stream.parquet (parquet); --once reads what is there and stops.
The chart's time step follows the span of the data (10 s for a few minutes, 1 min
for an hour, 6 h for a month), so that each line has tens to a couple of hundred
points. Against a Spark cluster: --master spark://host:7077 with the archive on
storage every executor can read, and pzq installed on the executors.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pzq.archive.format.archive_dir import archive_dir_problem
from pzq.cli.common import positive_seconds

# Chart time steps, seconds and how the axis names them; the smallest that gives at
# most MAX_POINTS points over the data's span is used.
STEPS = ((10, "10 s"), (60, "minute"), (300, "5 min"), (900, "15 min"), (3600, "hour"),
         (3 * 3600, "3 h"), (6 * 3600, "6 h"), (86400, "day"), (7 * 86400, "week"))
MAX_POINTS = 200
MARKERS_UP_TO = 40  # points in a line: fewer get a marker each, so that none is lost


@dataclass(frozen=True)
class Span:
    """The acked times of the archive's messages, and the chart's step for them."""

    first: datetime
    last: datetime
    step_s: int
    step_name: str


def acked_messages(spark: Any, archive: str) -> Any:
    from pyspark.sql import functions as F

    # Dead letters were never acked: they have no end-to-end latency to report.
    return (spark.read.format("zper").load(archive).where(F.col("outcome") == "acked")
            .withColumn("latency_ms", (F.col("acked_us") - F.col("stored_us")) / 1000.0))


def build_report(spark: Any, archive: str) -> Any:
    from pyspark.sql import functions as F

    bytes_per_message = F.aggregate("parts", F.lit(0).cast("long"),
                                    lambda total, part: total + F.length(part))
    return (acked_messages(spark, archive)
            .withColumn("hour", F.date_trunc("hour", F.timestamp_micros("acked_us")))
            .withColumn("bytes", bytes_per_message)
            .groupBy("topic", "hour")
            .agg(F.count("*").alias("messages"),
                 F.sum("bytes").alias("bytes"),
                 F.percentile_approx("latency_ms", 0.5).alias("latency_p50_ms"),
                 F.percentile_approx("latency_ms", 0.95).alias("latency_p95_ms"),
                 F.percentile_approx("latency_ms", 0.99).alias("latency_p99_ms"),
                 F.sum(F.col("deliveries") - 1).alias("redeliveries"),
                 F.sum((F.col("deliveries") > 1).cast("int")).alias("redelivered_messages"))
            .orderBy("topic", "hour"))


def acked_span(spark: Any, archive: str) -> Span | None:
    from pyspark.sql import functions as F

    row = acked_messages(spark, archive).agg(F.min("acked_us"), F.max("acked_us")).first()
    if row is None or row[0] is None:
        return None
    first, last = (datetime.fromtimestamp(us / 1e6, UTC) for us in row)
    step_s, step_name = next(((s, n) for s, n in STEPS
                              if (last - first).total_seconds() / s <= MAX_POINTS), STEPS[-1])
    return Span(first, last, step_s, step_name)


def build_series(spark: Any, archive: str, span: Span) -> Any:
    """Per topic and chart step (its start, UTC): what the chart shows."""
    from pyspark.sql import functions as F

    step_us = span.step_s * 1_000_000
    start = F.timestamp_micros((F.col("acked_us") / step_us).cast("long") * step_us)
    return (acked_messages(spark, archive).withColumn("step", start)
            .groupBy("topic", "step")
            .agg(F.count("*").alias("messages"),
                 F.percentile_approx("latency_ms", 0.5).alias("latency_p50_ms"),
                 F.percentile_approx("latency_ms", 0.99).alias("latency_p99_ms"),
                 F.sum(F.col("deliveries") - 1).alias("redeliveries"))
            .orderBy("topic", "step"))


# -- the chart -------------------------------------------------------------------------

def make_figure(series: Any, span: Span) -> Any:
    """Three panels over the data's span, one colour per topic in all of them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    figure, (volume, latency, redelivered) = plt.subplots(
        3, 1, figsize=(10, 9), sharex=True, height_ratios=(3, 3, 2))
    colours = topic_colours(sorted(series["topic"].unique()))
    half_step = timedelta(seconds=span.step_s / 2)
    for topic, busy in series.groupby("topic"):
        rows = on_every_step(busy, span)
        times = [start + half_step for start in rows.index]  # mid-step
        # Few busy steps get a marker each, so that a lone one (between gaps) shows.
        busy_steps = [index for index, p99 in enumerate(rows["latency_p99_ms"]) if p99 == p99]
        style = {"color": colours[topic], "linewidth": 1.5, "markevery": busy_steps,
                 "marker": "o" if len(busy) <= MARKERS_UP_TO else None, "markersize": 4}
        volume.plot(times, rows["messages"], label=topic, **style)
        latency.plot(times, rows["latency_p99_ms"], label=f"{topic} p99", **style)
        latency.plot(times, rows["latency_p50_ms"], label=f"{topic} p50", linestyle="--",
                     **style)
        redelivered.plot(times, rows["redeliveries"], label=f"{topic} redeliveries", **style)
    volume.set_ylabel(f"acked messages\nper {span.step_name}")
    latency.set_ylabel("stored \u2192 acked\nlatency (ms)")
    redelivered.set_ylabel(f"redeliveries\nper {span.step_name}")
    _scale_latency(latency)
    for axes in (volume, redelivered):
        axes.set_ylim(bottom=0)
    outside = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": "small"}
    volume.legend(title="topic", **outside)
    latency.legend(handles=[Line2D([], [], color="grey", label="p99"),
                            Line2D([], [], color="grey", linestyle="--", label="p50")],
                   **outside)
    for axes in (volume, latency, redelivered):
        axes.grid(True, alpha=0.3)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    redelivered.xaxis.set_major_locator(locator)
    redelivered.xaxis.set_major_formatter(
        mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    redelivered.set_xlim(*x_limits(span))
    redelivered.set_xlabel("time (UTC)")
    volume.set_title(f"pzq archive, {span.first:%Y-%m-%d %H:%M:%S} to "
                     f"{span.last:%Y-%m-%d %H:%M:%S} UTC, per {span.step_name}")
    figure.tight_layout()
    return figure


def on_every_step(rows: Any, span: Span) -> Any:
    """One row per step of the span: a step without messages shows 0 messages and 0
    redeliveries, and a gap in the latency lines, so no line joins two busy steps as if
    the time between them had been busy too."""
    import pandas as pd

    step_us = span.step_s * 1_000_000

    def step_start(moment: datetime) -> datetime:
        micros = int(moment.timestamp() * 1_000_000) // step_us * step_us
        return datetime.fromtimestamp(micros / 1e6, UTC).replace(tzinfo=None)

    steps = pd.date_range(step_start(span.first), step_start(span.last),
                          freq=f"{span.step_s}s")
    by_step = rows.assign(step=[_naive(start) for start in rows["step"]]).set_index("step")
    filled = by_step.reindex(steps)
    filled[["messages", "redeliveries"]] = filled[["messages", "redeliveries"]].fillna(0)
    return filled


def topic_colours(topics: Sequence[str]) -> dict[str, Any]:
    import matplotlib

    palette = matplotlib.colormaps["tab10" if len(topics) <= 10 else "tab20"]
    return {topic: palette(index % palette.N) for index, topic in enumerate(topics)}


def x_limits(span: Span) -> tuple[datetime, datetime]:
    """The data's span and a step's margin (points sit mid-step): never years."""
    step = timedelta(seconds=span.step_s)
    return _naive(span.first) - step / 2, _naive(span.last) + step * 1.5


def _scale_latency(axes: Any) -> None:
    values = [y for line in axes.get_lines() for y in line.get_ydata() if y > 0]
    if values and max(values) / min(values) > 20:
        axes.set_yscale("log")  # a p99 far above p50 would flatten p50 to the axis
    else:
        axes.set_ylim(bottom=0)


def _naive(moment: Any) -> datetime:
    """A UTC time as matplotlib and pandas' naive timestamps take it."""
    value: datetime = moment.to_pydatetime() if hasattr(moment, "to_pydatetime") else moment
    return value.replace(tzinfo=None)


def draw_chart(series: Any, span: Span, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure = make_figure(series, span)
    figure.savefig(path, dpi=100)
    plt.close(figure)


# -- the streaming report ---------------------------------------------------------------

def per_minute(stream: Any) -> Any:
    """The running report per topic and minute of acked messages (raw ZPER records
    carry no times, so only pzq's records count)."""
    from pyspark.sql import functions as F

    bytes_per_message = F.aggregate("parts", F.lit(0).cast("long"),
                                    lambda total, part: total + F.length(part))
    return (stream.where(F.col("outcome") == "acked")
            .withColumn("latency_ms", (F.col("acked_us") - F.col("stored_us")) / 1000.0)
            .withColumn("minute", F.date_trunc("minute", F.timestamp_micros("acked_us")))
            .groupBy("topic", "minute")
            .agg(F.count("*").alias("messages"),
                 F.sum(bytes_per_message).alias("bytes"),
                 F.percentile_approx("latency_ms", 0.5).alias("latency_p50_ms"),
                 F.percentile_approx("latency_ms", 0.99).alias("latency_p99_ms"),
                 F.sum(F.col("deliveries") - 1).alias("redeliveries")))


def run_stream(spark: Any, archive: str, out: Path, sink: str, trigger_s: float,
               once: bool) -> None:
    def write(batch: Any, batch_id: int) -> None:
        table = batch.orderBy("topic", "minute")
        if sink == "parquet":
            table.write.mode("overwrite").parquet(str(out / "report-stream.parquet"))
        else:
            print(f"-- update {batch_id}")
            print(table.toPandas().to_string(index=False), flush=True)

    stream = spark.readStream.format("zper").load(archive)
    query = (per_minute(stream).writeStream.outputMode("complete").foreachBatch(write)
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(processingTime=f"{trigger_s} seconds").start())
    try:
        if once:
            query.processAllAvailable()
        else:
            query.awaitTermination()
    finally:
        query.stop()


# -- the job ---------------------------------------------------------------------------

def master_url(text: str) -> str:
    """An argparse type: a master Spark can start with (its own rule, checked here so a
    wrong one is a usage line and not the Java gateway's traceback)."""
    if text == "yarn" or text.startswith(("spark://", "k8s://", "local")):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a Spark master: give local[*], local[N], spark://HOST:PORT, "
        "k8s://... or yarn")


def main(argv: Sequence[str] | None = None) -> int:
    # The whole docstring, as written: its first line alone stops mid-sentence.
    parser = argparse.ArgumentParser(prog="archive_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", required=True, help="the node's --archive-dir")
    parser.add_argument("--out", required=True, type=Path, help="directory for the report")
    parser.add_argument("--master", type=master_url, default="local[*]",
                        help="Spark master URL")
    parser.add_argument("--stream", action="store_true",
                        help="keep a per-minute report current (Structured Streaming)")
    parser.add_argument("--sink", choices=("console", "parquet"), default="console",
                        help="--stream: print each update, or write it as Parquet")
    parser.add_argument("--trigger", type=positive_seconds, default=5.0,
                        help="--stream: seconds between updates")
    parser.add_argument("--once", action="store_true",
                        help="--stream: report what is archived now, then stop")
    args = parser.parse_args(argv)
    # Checked here, as pzq-archive does: the source's own check comes back from Spark
    # wrapped in its Python worker's traceback.
    problem = archive_dir_problem(Path(args.archive))
    if problem is not None:
        parser.error(problem)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file: give a directory for the report")

    from pyspark.sql import SparkSession

    from pzq.spark import session

    running = SparkSession.getActiveSession()  # a caller's session: theirs to stop
    spark = session("pzq-archive-report", args.master, {
        "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4"})
    if args.stream:
        try:
            args.out.mkdir(parents=True, exist_ok=True)
            run_stream(spark, args.archive, args.out, args.sink, args.trigger, args.once)
        finally:
            if running is None:
                spark.stop()
        return 0
    try:
        report = build_report(spark, args.archive)
        args.out.mkdir(parents=True, exist_ok=True)
        report.write.mode("overwrite").parquet(str(args.out / "report.parquet"))
        rows = report.toPandas()
        span = acked_span(spark, args.archive)
        series = build_series(spark, args.archive, span).toPandas() if span else None
    finally:
        if running is None:
            spark.stop()
    if span is None or series is None:
        print(f"the archive holds no acked messages: {args.out / 'report.parquet'} is "
              "empty and no chart is drawn")
        return 0
    print(rows.to_string(index=False))
    draw_chart(series, span, args.out / "report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
