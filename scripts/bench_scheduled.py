#!/usr/bin/env python3
"""The live path beside a backlog of scheduled messages: produce and drain rates of
ordinary messages on a node without scheduled messages and on one holding a backlog
of them (DELAY a year ahead), measured in one run, one after the other, on fresh
nodes, ``--repeats`` times; the ratio is taken within each repeat.

    .venv/bin/python scripts/bench_scheduled.py                  # 1 000 000 scheduled
    .venv/bin/python scripts/bench_scheduled.py --backlog 100000 --count 20000 --json s.json
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pzq.bench.measure import measure_drain, measure_produce, rss_mb, start_pzq  # noqa: E402
from pzq.bench.nodes import NodeProcess  # noqa: E402
from pzq.bench.options import output_file, positive  # noqa: E402
from pzq.client import Producer  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402

A_YEAR_MS = 365 * 86_400_000
# After the backlog is stored, LevelDB's background compaction of its writes takes a
# core for a while: measured during it, the rates say that, not what the backlog costs.
# Each node is measured once it is idle: under IDLE_SHARE of a core over a second.
IDLE_SHARE = 0.05
SETTLE_MOST_S = 300.0


def settle(node: NodeProcess) -> float:
    """Wait until the node is idle; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_MOST_S:
        before = node.cpu_seconds()
        time.sleep(1.0)
        if node.cpu_seconds() - before < IDLE_SHARE:
            break
    return time.monotonic() - started


def schedule(receive_dsn: str, count: int) -> float:
    """Store ``count`` messages due in a year; the seconds it took."""
    started = time.perf_counter()
    with Producer(receive_dsn, window=4000, batch=1000) as producer:
        for n in range(count):
            producer.send([b"later %d" % n], [b"DELAY:%d" % A_YEAR_MS], timeout=60)
        producer.flush(120)
    return time.perf_counter() - started


def run(directory: Path, count: int, backlog: int) -> dict[str, float]:
    """One node measured as it is, or with ``backlog`` scheduled messages first."""
    node = start_pzq(directory, f"n{time.monotonic_ns()}")
    try:
        figures: dict[str, float] = {}
        if backlog:
            figures["schedule_s"] = schedule(node.receive_dsn, backlog)
            stats = node.stats()
            assert stats["scheduled"] == backlog, stats["scheduled"]
            figures["settle_s"] = settle(node)
        else:
            figures["settle_s"] = settle(node)
        before = node.cpu_seconds()
        figures["produce"] = measure_produce(node.receive_dsn, count, 100, 100)[0]
        middle = node.cpu_seconds()
        figures["drain"] = measure_drain(node.send_dsn, count)
        # the node's CPU per message: less moved by other work on the machine than rates
        figures["produce_cpu_us"] = (middle - before) / count * 1e6
        figures["drain_cpu_us"] = (node.cpu_seconds() - middle) / count * 1e6
        figures["rss_mb"] = rss_mb(node)
        return figures
    finally:
        node.stop()


def describe(figures: dict[str, float]) -> str:
    return (f"{figures['produce']:.0f} produced/s ({figures['produce_cpu_us']:.0f} µs CPU "
            f"each), {figures['drain']:.0f} drained/s ({figures['drain_cpu_us']:.0f} µs), "
            f"{figures['rss_mb']:.0f} MB")


@quiet_on_interrupt
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=positive(int), default=1_000_000)
    parser.add_argument("--count", type=positive(int), default=50_000)
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {"produce": [], "drain": [], "produce_cpu_us": [],
                                      "drain_cpu_us": []}
    rows = []
    with tempfile.TemporaryDirectory(prefix="pzq-bench-scheduled-") as temporary:
        for repeat in range(args.repeats):
            plain = run(Path(temporary), args.count, 0)
            loaded = run(Path(temporary), args.count, args.backlog)
            for name in ratios:  # (a figure too small to measure gives no ratio)
                if plain[name]:
                    ratios[name].append(loaded[name] / plain[name])
            rows.append((repeat, plain, loaded))
            print(f"repeat {repeat}: without {describe(plain)}; with {args.backlog} "
                  f"scheduled {describe(loaded)} "
                  f"(scheduling them took {loaded['schedule_s']:.1f} s, then idle after "
                  f"{loaded['settle_s']:.0f} s)", flush=True)
    for name, values in ratios.items():  # rates: higher is better; CPU: lower
        print(f"{name}: with the backlog / without, median {statistics.median(values):.2f} "
              f"(range {min(values):.2f}-{max(values):.2f}) over {len(values)} repeats")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "backlog": args.backlog, "count": args.count,
            "repeats": [{"without": plain, "with": loaded} for _, plain, loaded in rows],
            "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
