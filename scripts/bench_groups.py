#!/usr/bin/env python3
"""Topics and consumer groups: each figure beside its baseline, measured in the same run.

    .venv/bin/python scripts/bench_groups.py            # about a minute
    .venv/bin/python scripts/bench_groups.py --count 50000 --json groups.json

* produce 100 B, window 100, spread over 100 topics, against one topic;
* one topic with 3 groups drained at once, each group against one group alone;
* the consume endpoint end to end (producer window 100; the consumer's window, its
  credits, 100 and 1000) against --send-dsn (whose window adapts up to --prefetch).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pzq.bench.groups import (  # noqa: E402
    measure_group_drains,
    measure_group_end_to_end,
    measure_topic_produce,
    topic_produce_load,
)
from pzq.bench.measure import measure_end_to_end, run_workers  # noqa: E402
from pzq.bench.nodes import NodeProcess  # noqa: E402
from pzq.client import request_monitor  # noqa: E402


class Nodes:
    """The run's nodes: each killed after its scenario, and every one still running
    killed when the run ends, also by an error (none is left behind)."""

    def __init__(self, directory: Path, stack: contextlib.ExitStack) -> None:
        self.directory = directory
        self.stack = stack

    def start(self, name: str) -> NodeProcess:
        started = NodeProcess(self.directory / name, consume=True).start()
        self.stack.callback(lambda: started.kill() if started.running else None)
        return started


def groups_only(target: NodeProcess, groups: list[str]) -> None:
    """Topic t0 read by these groups only (not by --send-dsn)."""
    for command in ("DECLARE TOPIC t0", *(f"DECLARE GROUP t0 {group}" for group in groups),
                    "REMOVE GROUP t0 default"):
        answer = request_monitor(target.monitor_dsn, command, timeout=30)
        assert not answer.startswith(b"ERROR"), answer


def fill(target: NodeProcess, count: int) -> None:
    share = count // 4
    run_workers([(topic_produce_load, (target.receive_dsn, share, 100, 1000, 1))
                 for _ in range(4)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages per scenario")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    count = args.count - args.count % 4
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="pzq-bench-groups-") as folder, \
            contextlib.ExitStack() as stack:
        nodes = Nodes(Path(folder), stack)
        for topics in (1, 100):
            target = nodes.start(f"produce-{topics}")
            rate = measure_topic_produce(target.receive_dsn, count, 100, topics)
            target.kill()
            rows.append({"scenario": f"produce 100 B window 100, {topics} topic(s)",
                         "rate": rate})
        rows[1]["ratio"] = rows[1]["rate"] / rows[0]["rate"]  # type: ignore[operator]
        drains = {}
        for groups in (["g1"], ["g1", "g2", "g3"]):
            target = nodes.start(f"drain-{len(groups)}")
            groups_only(target, groups)
            fill(target, count)
            drains[len(groups)] = measure_group_drains(target.consume_dsn, "t0", groups,
                                                      count, 100)
            target.kill()
        single = drains[1]["g1"]
        rows.append({"scenario": "drain, one group alone", "rate": single})
        for group, rate in sorted(drains[3].items()):
            rows.append({"scenario": f"drain, 3 groups at once: {group}", "rate": rate,
                         "ratio": rate / single})
        target = nodes.start("e2e-send")
        plain = measure_end_to_end(target.receive_dsn, target.send_dsn, count, 100, 100)
        target.kill()
        rows.append({"scenario": "end to end window 100, --send-dsn", "rate": plain[0],
                     "p50_ms": plain[1], "p99_ms": plain[2]})
        for credits in (100, 1000):
            target = nodes.start(f"e2e-group-{credits}")
            groups_only(target, ["e2e"])
            grouped = measure_group_end_to_end(target.receive_dsn, target.consume_dsn, count,
                                               100, credits)
            target.kill()
            rows.append({"scenario": f"end to end window 100, a group, {credits} credits",
                         "rate": grouped[0], "p50_ms": grouped[1], "p99_ms": grouped[2],
                         "ratio": grouped[0] / plain[0]})
    print(f"{'scenario':<50} {'msg/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>6}")
    for row in rows:
        print(f"{row['scenario']:<50} {row['rate']:>9.0f} {_or(row, 'p50_ms'):>8} "
              f"{_or(row, 'p99_ms'):>8} {_or(row, 'ratio'):>6}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def _or(row: dict[str, object], key: str) -> str:
    value = row.get(key)
    return "" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
