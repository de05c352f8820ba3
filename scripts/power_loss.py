#!/usr/bin/env python3
"""Power cuts under load, per durability mode, with a table of results.

Each round runs a producer (window 100, 200 B to 4 KiB) and a consumer against a
node whose disk is a PowerFS (tests/support/powerfs.py: only what was fsync'd survives,
files and directory entries alike), kills it at a random moment and cuts the
power, restarts it on what is left and drains it; see tests/support/power_loss.py.

    scripts/power_loss.py                          # 20 rounds per mode
    scripts/power_loss.py --rounds 5 --mode hard-sync --mode 1s
    scripts/power_loss.py --mode 1s --sizes 16384 65536   # LevelDB's logs switch

A mode is ``hard-sync`` or a --sync-interval (``1s``, ``250ms``, ``0``). Exit 1
when --hard-sync lost an ACKed message or a timed mode lost one ACKed more than
its interval plus --margin before the cut; 2 on bad usage or without FUSE; a
restart that fails stops the run with its error. Stopped by SIGTERM or Ctrl-C (exit
143 or 130), or by an error, it kills its node, unmounts its PowerFS and stops it.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import contextlib
import random
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from pzq.bench.nodes import NodeProcess  # noqa: E402
from pzq.bench.options import positive  # noqa: E402
from pzq.durations import DurationError, duration_us  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402
from pzq.zmqio import Context  # noqa: E402
from tests.support.power_cut import (  # noqa: E402
    PowerCut,
    kill_processes_naming,
    unavailable,
)
from tests.support.power_loss import SIZES, Round, node_args, run_round  # noqa: E402

EXIT_OK = 0
EXIT_LOST = 1  # a loss outside the mode's window
EXIT_USAGE = 2
MODES = ("hard-sync", "1s", "0")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Totals:
    mode: str
    rounds: int = 0
    acked: int = 0
    lost: int = 0
    rounds_with_loss: int = 0
    oldest_lost_age_s: float = 0.0

    def add(self, result: Round) -> None:
        self.rounds += 1
        self.acked += result.acked
        self.lost += result.lost
        self.rounds_with_loss += result.lost > 0
        self.oldest_lost_age_s = max(self.oldest_lost_age_s, result.oldest_lost_age_s)

    def row(self) -> list[str]:
        return [self.mode, str(self.rounds), str(self.acked), str(self.lost),
                str(self.rounds_with_loss), f"{self.oldest_lost_age_s:.3f}"]


def mode(text: str) -> str:
    if text == "hard-sync":
        return text
    try:
        duration_us(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="power_loss", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive(int), default=20, help="per mode")
    parser.add_argument("--mode", type=mode, action="append",
                        help=f"hard-sync or a --sync-interval (default: {', '.join(MODES)})")
    parser.add_argument("--load", type=positive(float), nargs=2, default=(1.0, 4.0),
                        metavar=("FROM", "TO"), help="seconds of load before each cut")
    parser.add_argument("--margin", type=positive(float), default=0.8,
                        help="seconds beyond the interval a lost ACK may be old")
    parser.add_argument("--sizes", type=positive(int), nargs=2, default=SIZES,
                        metavar=("FROM", "TO"), help="message bodies, bytes")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    for option, (low, high) in (("--load", args.load), ("--sizes", args.sizes)):
        if low > high:
            parser.error(f"{option} {low} {high}: FROM must not be above TO")
    return args


def run_mode(name: str, args: argparse.Namespace, rng: random.Random,
             context: Context) -> Totals:
    totals = Totals(name)
    with tempfile.TemporaryDirectory(prefix="pzq-power-") as scratch:
        power = PowerCut(Path(scratch))
        archive = power.mountpoint / "archive"
        hard = name == "hard-sync"
        node = NodeProcess(power.mountpoint / "db",
                           *node_args(archive, hard, "1s" if hard else name))
        try:
            power.start()
            node.start()
            for number in range(1, args.rounds + 1):
                result = run_round(node, power, archive, rng.uniform(*args.load), rng,
                                   context, tuple(args.sizes))
                totals.add(result)
                print(f"{name} round {number}: {result}", flush=True)
        finally:  # also on an exception, SIGTERM and Ctrl-C (stopped_by_signals)
            try:
                if node.process is not None:
                    node.kill()  # first: it holds files in the mount
                # and a node whose start the signal cut short, inside its Popen (which
                # never returned: nothing holds it to stop)
                kill_processes_naming(node.database)
            finally:
                power.close()  # unmounts, and stops the FUSE process
    return totals


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the run as an exception does, so that what it started (the
    node, the FUSE process and its mount) is stopped and unmounted on the way out: the
    default SIGTERM ended the script at once and left them behind. The run then ends
    with 128 + the signal's number; a second signal waits for that cleanup."""
    def stop(signum: int, frame: FrameType | None) -> NoReturn:
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    before = {each: signal.signal(each, stop) for each in STOP_SIGNALS}
    try:
        yield
    finally:
        for each, handler in before.items():
            signal.signal(each, handler)


def outside_window(totals: Totals, margin: float) -> bool:
    if totals.mode == "hard-sync":
        return totals.lost > 0
    interval_s = duration_us(totals.mode) / 1e6
    return interval_s > 0 and totals.oldest_lost_age_s >= interval_s + margin


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths,
                                                                        strict=True))
                     for row in rows)


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"power_loss: FUSE is not available: {reason}", file=sys.stderr)
        return EXIT_USAGE
    rng = random.Random(args.seed)
    context = Context()
    try:
        with stopped_by_signals():
            results = [run_mode(name, args, rng, context) for name in args.mode or MODES]
    finally:
        context.term()
    header = ["mode", "rounds", "ACKed", "lost", "rounds with loss", "oldest lost ACK s"]
    print(table([header, *(totals.row() for totals in results)]))
    return EXIT_LOST if any(outside_window(t, args.margin) for t in results) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
