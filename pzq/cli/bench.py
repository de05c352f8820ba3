"""pzq-bench: pzq against its ceiling, measured in one run on the same sockets.

The ceiling is a minimal pyzmq device that ACKs every message at once and stores
nothing, driven by the same load generators; every pzq figure is also reported as
a ratio to it, and to the C++ original pzq when --original names its binary. Load
generators are raw pyzmq loops in their own processes, so the client is not what
is measured (the ceiling shows what they reach).

    scripts/bench.py --quick                  about a minute
    scripts/bench.py --json out.json --png out.png
    scripts/bench.py --quick --original "$(scripts/build-original)"
    pzq-bench --shards 2        a partitioned topic through 2 shards against one node
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from pzq.bench.options import output_file, positive
from pzq.bench.original import check_binary
from pzq.bench.report import draw_chart, matplotlib_installed, print_table
from pzq.bench.run_line import run_line
from pzq.bench.scenarios import PLANS, run_benchmark
from pzq.bench.shards import compare_shards
from pzq.tool_base import ToolParser, quiet_on_closed_pipe, quiet_on_interrupt


def make_argument_parser() -> ToolParser:
    parser = ToolParser("pzq-bench", __doc__)
    parser.add_argument("--quick", action="store_true", help="about a minute")
    parser.add_argument("--smoke", action="store_true", help="seconds: only checks it runs")
    parser.add_argument("--json", type=output_file, help="write the figures as JSON here")
    parser.add_argument("--png", type=output_file,
                        help="draw the ratios here (needs matplotlib: pip install 'pzq[bench]')")
    parser.add_argument("--original", type=Path, metavar="PATH",
                        help="the C++ original pzq's binary: measure it in the same run")
    parser.add_argument("--shards", type=positive(int), metavar="N",
                        help="instead: routing clients on a partitioned topic through "
                             "pzq --shards N against one node (scripts/bench_shards.py)")
    return parser


@quiet_on_closed_pipe
@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    if args.shards is not None:
        count = 2_000 if args.smoke else 10_000 if args.quick else 20_000
        compare_shards(args.shards, count, 2, 1 if args.smoke or args.quick else 3, args.json)
        return 0
    if args.original is not None:
        problem = check_binary(args.original)
        if problem is not None:
            parser.error(f"--original: {problem}")
    if args.png and not matplotlib_installed():
        parser.error("--png needs matplotlib, which is not installed: "
                     "pip install 'pzq[bench]' (or leave out --png)")
    plan = PLANS["smoke" if args.smoke else "quick" if args.quick else "full"]
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="pzq-bench-") as directory:
        figures = run_benchmark(plan, Path(directory), args.original)
    print(run_line(started))
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps([asdict(figure) for figure in figures], indent=2))
    if args.png:
        draw_chart(figures, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
