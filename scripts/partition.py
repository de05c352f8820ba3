#!/usr/bin/env python3
"""Partition scenarios against a 3-node cluster of real daemons, with a table of results.

Each node's cluster links run through fault-injecting TCP proxies on loopback; see
tests/support/partition_scenarios.py for what a scenario does and what the figures mean.

    scripts/partition.py --scenario all
    scripts/partition.py --scenario origin-cut --seconds 5 --json
    scripts/partition.py --list

The daemons are started as ``python -m pzq`` with this interpreter and its
PYTHONPATH, from a scratch directory, so PYTHONPATH chooses the pzq they run.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from pzq.bench.options import positive  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402
from tests.support.partition_cluster import ClusterTimings  # noqa: E402
from tests.support.partition_report import Report  # noqa: E402
from tests.support.partition_scenarios import BY_NAME, LONG, SCENARIOS, Plan, run_scenario  # noqa: E402

EXIT_OK = 0
EXIT_LOST = 1  # a message ACKed "1" without REPLICATION_FAILED was never consumed
EXIT_USAGE = 2

COLUMNS = [("scenario", "scenario"), ("R", "replicas"), ("produced", "produced"),
           ("ACKed ok", "acked_ok"), ("ACKed RF", "acked_replication_failed"),
           ("consumed", "consumed"), ("lost", "lost"), ("dup msgs", "delivered_more_than_once"),
           ("by 2 nodes", "delivered_by_two_nodes"), ("after kill", "takeover_deliveries"),
           ("copies left", "copies_left_per_node"), ("gap s", "longest_gap_s"),
           ("negative", "negative")]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="partition", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="all",
                        help="a scenario name (see --list) or 'all' (default)")
    parser.add_argument("--seconds", type=positive(float), default=LONG.cut_s,
                        help="how long a cut lasts; links flap for four times as long "
                             "(default %(default)s)")
    parser.add_argument("--timeout-nodes", type=positive(int), default=2_000_000, metavar="US")
    parser.add_argument("--ack-timeout", type=positive(int), default=2_000_000, metavar="US")
    parser.add_argument("--timeout-replication", type=positive(int), default=500_000, metavar="US")
    parser.add_argument("--json", action="store_true", help="one JSON object per scenario")
    parser.add_argument("--logs", type=Path, help="write the nodes' debug logs under this folder")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return parser.parse_args(argv)


def plan_from(args: argparse.Namespace) -> Plan:
    timings = ClusterTimings(args.timeout_nodes, args.ack_timeout, args.timeout_replication)
    return replace(LONG, cut_s=args.seconds, flap_s=4 * args.seconds, timings=timings)


def pzq_in_use(cwd: Path) -> str:
    """Where the daemons' ``import pzq`` comes from (same interpreter, env and cwd)."""
    return subprocess.run([sys.executable, "-c", "import pzq; print(pzq.__file__)"],
                          capture_output=True, text=True, cwd=cwd, check=True).stdout.strip()


def table(reports: list[Report]) -> str:
    rows = [[name for name, _ in COLUMNS]]
    for report in reports:
        figures: dict[str, Any] = report.as_dict()
        rows.append(["-" if figures[key] is None else str(figures[key]) for _, key in COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     for row in rows)


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for scenario in SCENARIOS:
            print(f"{scenario.name:18} R={scenario.replicas}  {scenario.summary}")
        return EXIT_OK
    if args.scenario != "all" and args.scenario not in BY_NAME:
        print(f"partition: no scenario {args.scenario!r} (see --list)", file=sys.stderr)
        return EXIT_USAGE
    logs = args.logs.resolve() if args.logs else None
    chosen = SCENARIOS if args.scenario == "all" else [BY_NAME[args.scenario]]
    reports = []
    with tempfile.TemporaryDirectory(prefix="pzq-partition-") as scratch:
        os.chdir(scratch)  # ``python -m pzq`` puts its cwd first on sys.path
        print(f"pzq: {pzq_in_use(Path(scratch))}", file=sys.stderr)
        for scenario in chosen:
            report = run_scenario(scenario, plan_from(args), Path(scratch) / scenario.name,
                                  logs)
            reports.append(report)
            if args.json:
                print(json.dumps(report.as_dict()), flush=True)
            else:
                print(f"{scenario.name}: {scenario.summary}", file=sys.stderr, flush=True)
    if not args.json:
        print(table(reports))
    return EXIT_LOST if any(report.lost for report in reports) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
