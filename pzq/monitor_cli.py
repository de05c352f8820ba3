"""``pzq-monitor``: a node's figures once, live (``--watch``), or as a health check.

    pzq-monitor --dsn tcp://127.0.0.1:11133                 a table of STATS
    pzq-monitor --dsn A --dsn B --watch                     live, side by side
    pzq-monitor --json                                      STATS as JSON
    pzq-monitor --check                                     exit 0 when healthy
    pzq-monitor --command MONITOR                           the original text answer
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from typing import Any, Sequence

from rich.console import Console
from rich.live import Live
from rich.table import Table

from pzq import security
from pzq.errors import ConfigError
from pzq.security import ClientCurve
from pzq.tools import DEFAULT_MONITOR, request_monitor

EXIT_OK = 0  # answered (and, with --check, healthy)
EXIT_UNHEALTHY = 1  # --check: the node answered but something is wrong
EXIT_NO_ANSWER = 3  # no answer within --timeout (2 is argparse's usage error)

SPARKS = "▁▂▃▄▅▆▇█"
HISTORY = 60
ROWS = (("messages", "stored"), ("messages_inflight", "in flight"),
        ("messages_ready", "ready again"), ("dead_letters", "dead letters"),
        ("db_size", "stored bytes"), ("received", "received"), ("delivered", "delivered"),
        ("acked", "acked"), ("nacked", "nacked"), ("expired", "expired"),
        ("evicted", "evicted"), ("redelivered", "redelivered"),
        ("consumers_connected", "consumers"), ("pending_producer_acks", "ACKs waiting"),
        ("store_failures", "store failures"), ("syncs", "batches written"),
        ("uptime_seconds", "uptime s"))


def fetch_stats(dsn: str, timeout: float, curve: ClientCurve | None) -> dict[str, Any] | None:
    try:
        return json.loads(request_monitor(dsn, "STATS", timeout, curve))
    except (TimeoutError, ValueError):
        return None


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1
    return "".join(SPARKS[int((value - low) / span * (len(SPARKS) - 1))] for value in values)


def table(stats: dict[str, dict[str, Any] | None],
          history: dict[str, deque[float]] | None = None) -> Table:
    """One column per node; a node that did not answer shows as down."""
    view = Table(title="pzq")
    view.add_column("figure")
    for dsn in stats:
        view.add_column(dsn, justify="right")
    view.add_row("node", *[s["node_id"] if s else "[red]DOWN[/]" for s in stats.values()])
    for key, label in ROWS:
        view.add_row(label, *[str(s.get(key, "")) if s else "" for s in stats.values()])
    for key in ("received", "delivered", "acked"):
        view.add_row(f"{key}/s (1s, 60s)", *[
            f"{s['rates'][key + '_1s']:.0f}, {s['rates'][key + '_60s']:.0f}"
            if s and "rates" in s else "" for s in stats.values()])
    view.add_row("ACK latency ms p50/p99", *[
        f"{s['ack_latency_ms']['p50']:.1f} / {s['ack_latency_ms']['p99']:.1f}"
        if s and "ack_latency_ms" in s else "" for s in stats.values()])
    view.add_row("peers", *[", ".join(f"{p['endpoint']} {p['state']}" for p in s["peers"])
                            if s and s.get("peers") else "" for s in stats.values()])
    if history is not None:
        view.add_row("stored, last minute", *[sparkline(list(history[dsn])) for dsn in stats])
    return view


def health_problems(before: dict[str, Any] | None, now: dict[str, Any] | None,
                    max_pending_acks: int) -> list[str]:
    """Why a node is not healthy, from two STATS answers a moment apart."""
    if now is None or before is None:
        return ["no answer"]
    problems = []
    if now.get("store_failures", 0) > before.get("store_failures", 0):
        problems.append("store writes are failing")
    if now.get("archive", {}).get("failures", 0) > before.get("archive", {}).get("failures", 0):
        problems.append("archive writes are failing")
    if now.get("pending_producer_acks", 0) > max_pending_acks:
        problems.append(f"{now['pending_producer_acks']} producer ACKs cannot be sent")
    down = [peer["endpoint"] for peer in now.get("peers", []) if peer["state"] != "up"]
    if down:
        problems.append("peer down: " + ", ".join(down))
    return problems


def make_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pzq-monitor", description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", action="append", help="a node's --monitor-dsn (repeatable)")
    parser.add_argument("--json", action="store_true", help="print STATS as JSON")
    parser.add_argument("--watch", action="store_true", help="a live view until Ctrl-C")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    parser.add_argument("--iterations", type=int, default=0,
                        help="with --watch: stop after N refreshes (0: never)")
    parser.add_argument("--check", action="store_true", help="exit 0 only when healthy")
    parser.add_argument("--max-pending-acks", type=int, default=10_000,
                        help="--check: more producer ACKs waiting than this is unhealthy")
    parser.add_argument("--command", help="send this command and print the raw answer")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait")
    parser.add_argument("--curve-client-key", metavar="FILE")
    parser.add_argument("--curve-server-key", metavar="FILE")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    try:
        curve = security.client_curve(args.curve_client_key, args.curve_server_key)
    except ConfigError as exc:
        parser.error(str(exc))
    dsns = args.dsn or [DEFAULT_MONITOR]
    if args.command:
        return raw_command(dsns, args.command, args.timeout, curve)
    if args.check:
        return check(dsns, args, curve)
    if args.watch:
        return watch(dsns, args, curve)
    stats = {dsn: fetch_stats(dsn, args.timeout, curve) for dsn in dsns}
    if args.json:
        print(json.dumps(stats[dsns[0]] if len(dsns) == 1 else stats, indent=2, sort_keys=True))
    else:
        Console().print(table(stats))
    return EXIT_OK if all(stats.values()) else EXIT_NO_ANSWER


def raw_command(dsns: list[str], command: str, timeout: float,
                curve: ClientCurve | None) -> int:
    for dsn in dsns:
        try:
            reply = request_monitor(dsn, command, timeout, curve)
        except TimeoutError as exc:
            print(f"pzq-monitor: error: {exc}", file=sys.stderr)
            return EXIT_NO_ANSWER
        print(reply.decode(errors="replace").rstrip("\n"))
        if reply.startswith(b"ERROR"):
            return EXIT_UNHEALTHY
    return EXIT_OK


def check(dsns: list[str], args: argparse.Namespace, curve: ClientCurve | None) -> int:
    before = {dsn: fetch_stats(dsn, args.timeout, curve) for dsn in dsns}
    if all(before.values()):
        time.sleep(min(args.interval, 1.0))  # two looks, to see failure counts move
    worst = EXIT_OK
    for dsn in dsns:
        now = fetch_stats(dsn, args.timeout, curve) if before[dsn] else None
        problems = health_problems(before[dsn], now, args.max_pending_acks)
        if problems:
            print(f"{dsn}: unhealthy: {'; '.join(problems)}", file=sys.stderr)
            worst = max(worst, EXIT_NO_ANSWER if problems == ["no answer"] else EXIT_UNHEALTHY)
        else:
            print(f"{dsn}: healthy")
    return worst


def watch(dsns: list[str], args: argparse.Namespace, curve: ClientCurve | None) -> int:
    history = {dsn: deque(maxlen=HISTORY) for dsn in dsns}
    refreshes = 0
    with Live(auto_refresh=False, screen=args.iterations == 0) as live:
        try:
            while not args.iterations or refreshes < args.iterations:
                stats = {dsn: fetch_stats(dsn, args.timeout, curve) for dsn in dsns}
                for dsn, figures in stats.items():
                    history[dsn].append(figures["messages"] if figures else 0)
                live.update(table(stats, history), refresh=True)
                refreshes += 1
                time.sleep(args.interval)  # the refresh period of a live view
        except KeyboardInterrupt:
            pass
    return EXIT_OK
