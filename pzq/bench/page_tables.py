"""Each benchmark's JSON as the tables of the performance page: one function a
benchmark, from the file its ``--json`` wrote to the tables, every cell a figure of
that file (medians and ranges as the benchmark took them)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from pzq.bench.rst_table import Table, number, ratio, spread
from pzq.bench.shards import FIGURES as SHARD_FIGURES

NOT_RUN = "not run"


def ceiling(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/bench.py: pzq, the ceiling and (with --original) the C++ original."""
    original = any(figure["vs_original"] is not None for figure in found)
    table = Table(["scenario", "target", "msg/s", "p50 ms", "p99 ms", "RSS MB", "/ceil",
                   *(["/orig"] if original else [])])
    for figure in found:  # a row of rounds: medians, and ranges over its rounds
        table.add(figure["scenario"], figure["target"], _rounds(figure, "rate", number),
                  _measured(figure["p50_ms"]), _measured(figure["p99_ms"]),
                  _measured(figure["rss_mb"]), _rounds(figure, "ratio", ratio),
                  *([_rounds(figure, "vs_original", ratio)] if original else []))
    return [table]


def _rounds(figure: dict[str, Any], key: str, shown: Callable[[float | None], str]) -> str:
    """A figure of scripts/bench.py, with its range where it has one (figures written
    before the rounds have none)."""
    if figure.get(f"{key}_range") is None:
        return shown(figure[key])
    return _with_range(figure, key, shown)


def groups(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/bench_groups.py: each scenario beside its baseline."""
    rates = Table(["scenario", "msg/s (range)", "p50 ms", "p99 ms", "ratio (range)",
                   "p99 ratio", "target", "met"])
    cpu = Table(["drain", "node CPU µs a message", "consumer CPU µs a message"],
                caption="CPU per delivered and ACKed message in the drains (the node's from "
                        "``/proc``, the consumer's own), medians:")
    for row in found:
        rates.add(row["scenario"], _with_range(row, "rate", number), _measured(row.get("p50_ms")),
                  _measured(row.get("p99_ms")), _with_range(row, "ratio", ratio),
                  ratio(row.get("p99_ratio")), row["target"],
                  {True: "yes", False: "no", None: ""}[row["met"]])
        if "node_cpu_us" in row:
            cpu.add(row["scenario"], number(row["node_cpu_us"]), number(row["consumer_cpu_us"]))
    return [rates, cpu]


PEER_SYSTEMS = (("pzq", "pzq"), ("Redis Streams", "Redis"), ("JetStream", "NATS"))
OVER_SYNC = "pzq asyncio/sync"


def peers(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/bench_peers.py: the sync clients' rows, then the asyncio clients'."""
    heads = ["figure", "unit", *(name for name, _ in PEER_SYSTEMS),
             *(f"pzq/{short}" for _, short in PEER_SYSTEMS[1:])]
    sync, aio = Table(list(heads)), Table([*heads, OVER_SYNC])
    for row in found:
        asyncio = row["figure"].startswith("asyncio: ")
        cells = [row["figure"], row["unit"]]
        for name, _ in PEER_SYSTEMS:
            cells.append(NOT_RUN if name in skipped else _median(row.get(name)))
        for name, short in PEER_SYSTEMS[1:]:
            theirs = row.get(f"pzq/{short}")
            cells.append(NOT_RUN if name in skipped
                         else spread(theirs["repeats"]) if theirs else "")
        if asyncio:
            over = row.get(OVER_SYNC)
            aio.add(*cells, spread(over["repeats"]) if over else "")
        else:
            sync.add(*cells)
    return [sync, *([aio] if aio.rows else [])]


def shards(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/bench_shards.py: one node against the shards, each ratio in its repeat."""
    runs = found["runs"]
    table = Table(["figure", "1 node", "shards", "shards / 1 node (range)"])
    for label, name, unit in SHARD_FIGURES:
        figure = found["figures"][label]
        ratios = [run["shards"][name] / run["one"][name] for run in runs if run["one"][name]]
        table.add(label, f"{number(figure['one'])} {unit}", f"{number(figure['shards'])} {unit}",
                  spread(ratios))
    return [table]


def scheduled(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/bench_scheduled.py: a node without scheduled messages and one with them."""
    repeats = found["repeats"]
    table = Table(["figure", "without", f"with {number(found['backlog'])} scheduled",
                   "with / without (range)"])
    for key, label in (("produce", "produce, messages/s"), ("drain", "drain, messages/s"),
                       ("produce_cpu_us", "node CPU per produced message, µs"),
                       ("drain_cpu_us", "node CPU per drained message, µs")):
        table.add(label, spread([run["without"][key] for run in repeats], "number"),
                  spread([run["with"][key] for run in repeats], "number"),
                  spread(found["ratios"][key]))
    table.add("node RSS, MB", spread([run["without"]["rss_mb"] for run in repeats], "number"),
              spread([run["with"]["rss_mb"] for run in repeats], "number"), "")
    table.add("storing the scheduled messages, s", "",
              spread([run["with"]["schedule_s"] for run in repeats], "number"), "")
    return [table]


def replay(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/bench_replay.py: live traffic alone and beside a replay, per replay rate."""
    table = Table(["replay rate", "live", "produced/s", "consumed/s", "ACK p50 ms",
                   "ACK p99 ms", "replayed/s", "node CPU", "µs/msg"])
    for result in found:
        for when in ("alone", "beside"):
            row = result[when]
            table.add(number(result["rate"]), when, number(row["produced_per_s"]),
                      number(row["consumed_per_s"]), number(row["ack_p50_ms"]),
                      number(row["ack_p99_ms"]), number(row.get("replayed_per_s")),
                      f"{row['node_core_share']:.0%}", number(row["node_cpu_us_per_message"]))
    return [table]


def zper(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/zper_bench.py: the writer, FETCH and Spark, each against its baseline."""
    table = Table(["what", "rate", "MB/s", "baseline", "ratio"])
    for row in found:
        what = row["what"]
        if what.startswith("ZPWriter"):
            table.add(what, f"{number(row['msg_per_s'])} msg/s", number(row["mb_per_s"]),
                      f"echo ceiling {number(row['ceiling_msg_per_s'])} msg/s",
                      ratio(row["vs_ceiling"]))
            table.add(f"{what}, against ``dd``", "", number(row["mb_per_s"]),
                      f"dd {number(row['dd_mb_per_s'])} MB/s", ratio(row["vs_dd"]))
        elif what.startswith("FETCH"):
            table.add(what, "", number(row["mb_per_s"]),
                      f"FETCH ceiling {number(row['ceiling_mb_per_s'])} MB/s",
                      ratio(row["vs_ceiling"]))
            table.add(f"{what}, against reading the files", "", number(row["mb_per_s"]),
                      f"files {number(row['files_mb_per_s'])} MB/s", ratio(row["vs_files"]))
        elif what.startswith("Spark"):
            table.add(f"{what}, {number(row['rows'])} rows", f"{number(row['rows_per_s'])} rows/s",
                      "", f"Parquet {number(row['parquet_rows_per_s'])} rows/s",
                      ratio(row["vs_parquet"]))
        elif what.startswith("streaming"):
            table.add(f"{what}, {number(row['rows'])} rows",
                      f"p50 {number(row['p50_ms'])} ms, p99 {number(row['p99_ms'])} ms",
                      "", "", "")
    if "Spark" in skipped:
        table.add("Spark batch read and streaming", NOT_RUN, "", "", "")
    return [table]


def authorization(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/authorization_cost.py: CURVE without --authorization and with it."""
    runs = found["runs"]
    table = Table(["figure", "without", "with"])
    count = len(runs["without"])
    table.add(f"messages per second, {'median of ' if count > 1 else ''}"
              f"{count} run{'s' if count > 1 else ''}",
              spread([rate for rate, _ in runs["without"]], "number"),
              spread([rate for rate, _ in runs["with"]], "number"))
    table.add("node CPU per message, every thread, µs",
              spread([us for _, us in runs["without"]], "number"),
              spread([us for _, us in runs["with"]], "number"))
    calls = found["intake_calls_us_per_message"]
    table.add("the calls --authorization adds, in process, µs a message",
              number(calls["without"]), number(calls["with"]))
    return [table]


def capacity(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/capacity.py: disk and memory per message, for each body size."""
    table = Table(["figure", *(f"{number(row['size'])} B bodies" for row in found)])
    for key, label, scale in (
            ("store_bytes_per_message", "store on disk per message, as written (LevelDB's "
             "log), B", 1.0),
            ("store_bytes_per_message_restarted", "store on disk per message, after a restart "
             "(as tables), B", 1.0),
            ("waiting_bytes_per_message", "memory per message stored and waiting, B", 1.0),
            ("inflight_bytes_per_message", "memory per message in flight, B", 1.0),
            ("archive_bytes_per_million", "archive on disk per million messages ACKed, MB",
             1e-6)):
        table.add(label, *(number(row[key] * scale) for row in found))
    return [table]


BACKUP_FIGURES = (("seconds", "the backup's time, s"), ("store_keys", "keys copied"),
                  ("store_bytes", "the store's copy, bytes"),
                  ("archive_bytes", "the archive's copy, bytes"), ("steps", "the loop's steps"),
                  ("longest_step_ms", "the longest step, wall time, ms"),
                  ("longest_step_phase", "the longest step's phase"),
                  ("most_step_cpu_ms", "most CPU in one step, ms"),
                  ("mean_step_cpu_ms", "CPU a step on average, ms"))


def backup(found: Any, skipped: Sequence[str]) -> list[Table]:
    """scripts/backup_pause.py: the backup's own figures, and the probes' answers
    without and during it."""
    state = found["backup"]
    steps = Table(["figure", "value"],
                  caption=f"A backup of a node holding {number(found['stored'])} messages of "
                          f"{found['size']} B, the archive on:")
    for key, label in BACKUP_FIGURES:
        if key in state:
            steps.add(label, _cell(state[key]))
    probes = Table(["probe", "without a backup: median / p99 / longest, ms",
                    "during the backup: median / p99 / longest, ms"])
    for name, label in (("ping", "``PING`` on the monitor"),
                        ("produce", "a message produced, window 1")):
        probes.add(label, _probe(found["baseline"][name]), _probe(found["during"][name]))
    return [steps, probes]


Render = Callable[[Any, Sequence[str]], list[Table]]


def _probe(figures: dict[str, float]) -> str:
    return " / ".join(number(figures[key]) for key in ("median_ms", "p99_ms", "max_ms"))


def _cell(value: object) -> str:
    return number(value) if isinstance(value, float | int) and not isinstance(value, bool) \
        else str(value)


def _measured(value: float | None) -> str:
    """A latency or RSS cell: empty where the scenario measured none (its 0)."""
    return number(value) if value else ""


def _median(found: dict[str, Any] | None) -> str:
    return number(statistics.median(found["repeats"])) if found else ""


def _with_range(row: dict[str, Any], key: str, shown: Callable[[float | None], str]) -> str:
    if key not in row:
        return ""
    low, high = row[f"{key}_range"]
    return shown(row[key]) if low == high else f"{shown(row[key])} ({shown(low)}-{shown(high)})"
