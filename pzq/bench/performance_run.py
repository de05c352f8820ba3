"""One run of every benchmark the performance page shows, in turn, each writing its
figures as JSON; their tables written as reStructuredText for docs/performance.rst to
include, each headed by the run's date, commit and machine
(scripts/performance_run.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pzq.bench import page_tables, peer_nats, peer_redis
from pzq.bench.machine import Machine, server_version, spark_versions, this_machine
from pzq.bench.peer_servers import find_binary
from pzq.bench.run_line import CHECKOUT
from pzq.tool_base import quiet_on_interrupt

SCRIPTS = CHECKOUT / "scripts"
OUT = CHECKOUT / "docs" / "performance"
MOST_S = 1800.0  # one benchmark's run, at most


@dataclass(frozen=True)
class Benchmark:
    name: str  # the file under docs/performance/
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    render: page_tables.Render
    software: tuple[str, ...] = ()  # versions to name in its header beyond the core's


# The full run's counts are chosen so that the whole run takes about 15 minutes on a
# 2-core machine (docs/performance.rst says which counts each table has).
BENCHMARKS = (
    Benchmark("ceiling", "bench.py", (), ("--smoke",), page_tables.ceiling),
    Benchmark("peers", "bench_peers.py", ("--count", "20000", "--repeats", "2"),
              ("--count", "500", "--repeats", "1"), page_tables.peers,
              ("redis-server", "nats-server")),
    Benchmark("groups", "bench_groups.py", ("--count", "10000", "--repeats", "2"),
              ("--count", "400", "--repeats", "1"), page_tables.groups),
    Benchmark("shards", "bench_shards.py", ("--count", "10000", "--repeats", "2"),
              ("--count", "1000", "--repeats", "1"), page_tables.shards),
    Benchmark("shards-replicas", "bench_shards.py",
              ("--count", "10000", "--repeats", "2", "--replicas", "1"),
              ("--count", "1000", "--repeats", "1", "--replicas", "1"), page_tables.shards),
    Benchmark("scheduled", "bench_scheduled.py",
              ("--backlog", "1000000", "--count", "20000", "--repeats", "3"),
              ("--backlog", "2000", "--count", "500", "--repeats", "1"), page_tables.scheduled),
    Benchmark("replay", "bench_replay.py",
              ("--archived", "20000", "--seconds", "4", "--rates", "1000,5000",
               "--repeats", "2"),
              ("--archived", "300", "--seconds", "2", "--rates", "1000", "--repeats", "1"),
              page_tables.replay),
    Benchmark("zper", "zper_bench.py",
              ("--count", "50000", "--spark-rows", "100000", "--stream-seconds", "10"),
              ("--count", "2000", "--no-spark"), page_tables.zper, ("PySpark", "Java")),
    Benchmark("authorization", "authorization_cost.py", ("--count", "30000", "--runs", "3"),
              ("--count", "500", "--runs", "1"), page_tables.authorization),
    Benchmark("capacity", "capacity.py", ("--count", "50000",), ("--count", "2000",),
              page_tables.capacity),
    Benchmark("backup", "backup_pause.py", ("--stored", "200000", "--probe-seconds", "5"),
              ("--stored", "5000", "--probe-seconds", "1"), page_tables.backup),
)
CORE_SOFTWARE = ("Python", "pyzmq", "libzmq", "plyvel", "LevelDB")
SPARK_SOFTWARE = ("PySpark", "Java")


@dataclass
class Outcome:
    command: list[str]
    began: datetime
    seconds: float
    problem: str | None = None  # why it has no figures
    skipped: tuple[str, ...] = ()  # the parts not measured (a peer, Spark)
    notes: tuple[str, ...] = ()  # one line each on what was not measured and why


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="performance_run", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="    scripts/performance_run.py                  # the page's run, about 15 "
               "minutes\n    scripts/performance_run.py --quick --out /tmp/figures   # a smoke "
               "test, minutes")
    parser.add_argument("--quick", action="store_true",
                        help="counts too small to measure anything: checks that every "
                             "benchmark runs and every table is written")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="where the tables go (default: docs/performance)")
    parser.add_argument("--original", type=Path, metavar="PATH",
                        help="the C++ original pzq's binary, measured beside pzq by "
                             "scripts/bench.py (scripts/build-original builds one)")
    parser.add_argument("--only", type=table_names, metavar="TABLE[,TABLE]",
                        help="run these benchmarks only and write their tables; the run's "
                             "summary (run.rst) is left as it is. Tables: "
                             + ", ".join(benchmark.name for benchmark in BENCHMARKS))
    args = parser.parse_args(argv)
    if args.original is not None and not args.original.is_file():
        parser.error(f"--original {args.original}: not a file")
    return args


def table_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = [benchmark.name for benchmark in BENCHMARKS]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{(unknown or [text])[0]!r} is not a table: choose from {', '.join(known)}")
    return names


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    machine = this_machine()
    skipped, notes = what_is_missing(machine)
    args.out.mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="pzq-performance-run-") as scratch:
        for benchmark in BENCHMARKS:
            if args.only is not None and benchmark.name not in args.only:
                continue
            extra = extra_arguments(benchmark, args, skipped)
            print(f"performance_run: {benchmark.name}: {benchmark.script} "
                  f"{' '.join(extra)}", file=sys.stderr, flush=True)
            outcome = run(benchmark, extra, Path(scratch), args.out)
            outcome.skipped = skipped.get(benchmark.name, ())
            outcome.notes = notes.get(benchmark.name, ())
            if "--no-spark" in extra and "Spark" not in outcome.skipped:
                outcome.skipped += ("Spark",)
                outcome.notes += ("Spark: not run in a --quick run.",)
            outcomes[benchmark.name] = outcome
            write_page_part(benchmark, outcome, machine, args)
    if args.only is None:  # the summary is of a whole run
        write_summary(outcomes, machine, args)
    failed = [name for name, outcome in outcomes.items() if outcome.problem]
    if failed:
        print(f"performance_run: failed: {', '.join(failed)} (their files say why)",
              file=sys.stderr)
        return 1
    return 0


def what_is_missing(machine: Machine) -> tuple[dict[str, tuple[str, ...]],
                                               dict[str, tuple[str, ...]]]:
    """The parts that cannot be measured here, per benchmark, and a line on each; the
    versions of those that can go into ``machine.software``."""
    skipped: dict[str, tuple[str, ...]] = {}
    notes: dict[str, tuple[str, ...]] = {}
    for system, binary in ((peer_redis.system(), "redis-server"),
                           (peer_nats.system(), "nats-server")):
        reason = system.missing()
        if reason is None:
            version = server_version(find_binary(binary))
            machine.software[binary] = version or "(version unknown)"
        else:
            skipped["peers"] = (*skipped.get("peers", ()), system.name)
            notes["peers"] = (*notes.get("peers", ()), f"{system.name}: not run, {reason}.")
    spark = spark_versions()
    if "Java" in spark:
        machine.software.update(spark)
    else:
        skipped["zper"] = ("Spark",)
        notes["zper"] = ("Spark: not run, PySpark or Java is not installed "
                         "(pip install 'pzq[spark]' and a Java runtime).",)
    return skipped, notes


def extra_arguments(benchmark: Benchmark, args: argparse.Namespace,
                    skipped: dict[str, tuple[str, ...]]) -> list[str]:
    extra = list(benchmark.quick if args.quick else benchmark.full)
    if benchmark.name == "ceiling" and args.original is not None:
        extra += ["--original", str(args.original)]
    if benchmark.name == "peers":
        chosen = [name for name, system in (("redis", "Redis Streams"), ("nats", "JetStream"))
                  if system not in skipped.get("peers", ())]
        extra += ["--peers", ",".join(chosen) or "none"]
    if benchmark.name == "zper" and "Spark" in skipped.get("zper", ()) \
            and "--no-spark" not in extra:
        extra.append("--no-spark")
    return extra


def run(benchmark: Benchmark, extra: list[str], scratch: Path, out: Path) -> Outcome:
    figures = out / f"{benchmark.name}.json"
    figures.unlink(missing_ok=True)
    command = [sys.executable, str(SCRIPTS / benchmark.script), *extra, "--json", str(figures)]
    log = scratch / f"{benchmark.name}.log"
    began, started = datetime.now(UTC), time.monotonic()
    try:
        with log.open("wb") as output:
            ran = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=output,
                                 stderr=subprocess.STDOUT, cwd=scratch, timeout=MOST_S,
                                 check=False)
        problem = (None if ran.returncode == 0 and figures.is_file()
                   else f"exited with {ran.returncode}")
    except subprocess.TimeoutExpired:
        problem = f"still running after {MOST_S:.0f} s"
    seconds = time.monotonic() - started
    shown = ["scripts/" + benchmark.script, *map(without_machine_paths, extra)]
    if problem is not None:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        problem += f": {tail[0]}" if tail else ""
    return Outcome(shown, began, seconds, problem)


def without_machine_paths(argument: str) -> str:
    """A command line as a reader would type it: the original's binary (a path of
    this machine's cache) as the command that builds it."""
    return '"$(scripts/build-original)"' if Path(argument).name == "pzq" \
        and Path(argument).is_absolute() else argument


def header(machine: Machine, outcome: Outcome, software: Sequence[str], quick: bool) -> str:
    lines = [".. Written by scripts/performance_run.py: run it again rather than edit this.",
             ""]
    if quick:
        lines += [".. note:: A ``--quick`` run: counts too small to measure anything. These",
                  "   cells show the table's form only; quote no figure of them.", ""]
    lines += [f":Run: {machine.when()}; this benchmark began "
              f"{outcome.began.strftime('%H:%M UTC')} and took {minutes(outcome.seconds)}",
              f":Code: {machine.code_and_tree()}",
              f":Machine: {machine.hardware()}",
              f":Software: {machine.versions([*CORE_SOFTWARE, *software])}",
              f":Command: ``{' '.join(outcome.command)}``", ""]
    for note in outcome.notes:
        lines += [f"{note}", ""]
    return "\n".join(lines) + "\n"


def write_page_part(benchmark: Benchmark, outcome: Outcome, machine: Machine,
                    args: argparse.Namespace) -> None:
    software = [name for name in benchmark.software
                if not (name in SPARK_SOFTWARE and "Spark" in outcome.skipped)]
    text = header(machine, outcome, software, args.quick)
    if outcome.problem is None:
        found = json.loads((args.out / f"{benchmark.name}.json").read_text())
        try:
            text += "\n".join(table.rst() for table in benchmark.render(found, outcome.skipped))
        except (KeyError, IndexError, TypeError, ValueError) as error:  # its JSON changed
            outcome.problem = f"wrote figures its table cannot read ({error!r})"
    if outcome.problem is not None:
        text += f"Not measured: the benchmark {outcome.problem}.\n"
        print(f"performance_run: {benchmark.name} {outcome.problem}", file=sys.stderr,
              flush=True)
    (args.out / f"{benchmark.name}.rst").write_text(text, encoding="utf-8")


def write_summary(outcomes: dict[str, Outcome], machine: Machine,
                  args: argparse.Namespace) -> None:
    """run.rst: the run as a whole, each benchmark's command and time."""
    total = sum(outcome.seconds for outcome in outcomes.values())
    kind = "A --quick run (a smoke test, no figures to quote)" if args.quick else "The run"
    lines = [".. Written by scripts/performance_run.py: run it again rather than edit this.",
             "", f"{kind} of {machine.when()}, {machine.code_and_tree()}, "
             f"took {minutes(total)} on "
             f"{machine.hardware()}; {machine.versions(CORE_SOFTWARE)}.", "",
             ".. list-table::", "   :header-rows: 1", "",
             "   * - table", "     - command", "     - began", "     - took"]
    for name, outcome in outcomes.items():
        lines += [f"   * - {name}", f"     - ``{' '.join(outcome.command)}``",
                  f"     - {outcome.began.strftime('%H:%M UTC')}",
                  f"     - {minutes(outcome.seconds)}"
                  + (f" (failed: {outcome.problem})" if outcome.problem else "")]
    (args.out / "run.rst").write_text("\n".join(lines) + "\n", encoding="utf-8")


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"
