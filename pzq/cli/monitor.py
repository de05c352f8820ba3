"""pzq-monitor: a node's figures once, live (--watch), or as a health check.

    pzq-monitor                                   a table of the quick-start node's STATS
    pzq-monitor --dsn A --dsn B --watch           live, side by side
    pzq-monitor --json                            STATS as JSON (--watch: one line a refresh)
    pzq-monitor --check                           exit 0 when healthy
    pzq-monitor --command MONITOR                 the original text answer
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pzq.cli import human
from pzq.cli.common import (
    DEFAULT_MONITOR,
    add_curve_options,
    curve_from,
    endpoint,
    fail,
    positive_seconds,
)
from pzq.cli.topics_table import topics_table
from pzq.client.monitor import StatsAnswer, fetch_stats, request_monitor, taken_over_inflight
from pzq.errors import NO_ANSWER, EndpointError, ExitCode
from pzq.security import ClientSecurity
from pzq.tool_base import ToolParser, quiet_on_closed_pipe, quiet_on_interrupt, whole_number

# Its meanings of the codes in pzq.errors:
EXIT_OK = ExitCode.OK  # answered (and, with --check, healthy)
EXIT_UNHEALTHY = ExitCode.FAILURE  # --check: the node answered but something is wrong
EXIT_USAGE = ExitCode.USAGE  # a bad option or endpoint
EXIT_NO_ANSWER = NO_ANSWER  # no answer within --timeout

SPARKS = "▁▂▃▄▅▆▇█"
HISTORY = 60
# The delivery figures are --send-dsn's (the group default) alone, and say so: a named
# group's are in the topics table, where its deliveries in flight would otherwise
# contradict the node's "in flight 0".
SEND = " (--send-dsn)"
COUNTS = (("messages", "stored"), ("messages_inflight", "in flight" + SEND),
          ("messages_ready", "ready again" + SEND), ("dead_letters", "dead letters"),
          ("received", "received"), ("delivered", "delivered" + SEND),
          ("acked", "acked" + SEND), ("nacked", "nacked" + SEND), ("expired", "expired"),
          ("evicted", "evicted"), ("redelivered", "redelivered" + SEND),
          ("queue_full", "QUEUE_FULL refusals"), ("duplicates", "duplicates (DEDUP-ID)"),
          ("consumers_connected", "consumers" + SEND),
          ("pending_producer_acks", "ACKs waiting"),
          ("store_failures", "store failures"), ("syncs", "batches written"))


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1
    return "".join(SPARKS[int((value - low) / span * (len(SPARKS) - 1))] for value in values)


def _cells(answers: Sequence[StatsAnswer], show: Any) -> list[str]:
    """One cell per node: ``show(stats)``, or nothing for a node that did not answer."""
    return [show(answer.stats) if answer.stats else "" for answer in answers]


def table(answers: Sequence[StatsAnswer], history: dict[str, deque[float]] | None = None) -> Table:
    """One column per node; a node that did not answer shows as DOWN."""
    view = Table(title="pzq")
    view.add_column("figure")
    for answer in answers:
        view.add_column(answer.dsn, justify="right", no_wrap=True)
    view.add_row("node", *[answer.stats["node_id"] if answer.stats else "[red]DOWN[/]"
                           for answer in answers])
    view.add_row("uptime", *_cells(answers, lambda s: human.duration(s["uptime_seconds"])))
    for key, label in COUNTS:
        view.add_row(label, *_cells(answers, lambda s, key=key: human.count(s.get(key, 0))))
    view.add_row("stored bytes", *_cells(answers, lambda s: human.size(s["db_size"])))
    for key in ("received", "delivered", "acked"):
        where = "" if key == "received" else SEND
        view.add_row(f"{key}/s{where} (1 s, 60 s)", *_cells(answers, lambda s, key=key: (
            f"{human.rate(s['rates'][key + '_1s'])}, {human.rate(s['rates'][key + '_60s'])}"
            if "rates" in s else "")))
    view.add_row("ACK latency p50 / p99" + SEND, *_cells(answers, _latency))
    if any(answer.stats and "authorization" in answer.stats for answer in answers):
        view.add_row("refused by --authorization", *_cells(answers, _forbidden))
    view.add_row("peers", *_cells(answers, lambda s: ", ".join(
        f"{peer['endpoint']} {peer_words(peer['state'])}" for peer in s.get("peers", []))))
    if any(answer.stats and answer.stats.get("taken_over") for answer in answers):
        view.add_row("taking over", *_cells(answers, _taken_over))
    if history is not None:
        view.add_row("stored, last minute",
                     *[sparkline(list(history[answer.dsn])) for answer in answers])
    return view


def _taken_over(stats: dict[str, Any]) -> str:
    """Per origin taken over: its copies here and what is out, all groups together."""
    lines = []
    for origin, taken in sorted((stats.get("taken_over") or {}).items()):
        lines.append(f"{origin}{' (paused)' if taken.get('paused') else ''}: "
                     f"{human.count(taken['replicas'])} copies, "
                     f"{human.count(taken_over_inflight(taken))} in flight")
    return "\n".join(lines)


def _forbidden(stats: dict[str, Any]) -> str:
    """The refusals of the node's rules by kind (a node without them: none)."""
    forbidden = stats.get("forbidden", {})
    return ", ".join(f"{kind} {human.count(forbidden.get(kind, 0))}"
                     for kind in ("produce", "consume", "admin"))


def _latency(stats: dict[str, Any]) -> str:
    latency = stats.get("ack_latency_ms", {})
    if not latency.get("samples"):
        return "no ACK in the last minute"
    return f"{human.latency_ms(latency['p50'])} / {human.latency_ms(latency['p99'])}"


def as_json(answers: Sequence[StatsAnswer]) -> dict[str, Any]:
    """STATS of one node, or of several by endpoint; a node that did not answer says why."""
    shown = {answer.dsn: answer.stats if answer.stats else
             {"monitor": answer.dsn, "up": False, "error": answer.error}
             for answer in answers}
    return shown[answers[0].dsn] if len(answers) == 1 else shown


PEER_WORDS = {"left": "left (stopped by SIGTERM)"}  # STATS peers[].state, said in words


def peer_words(state: str) -> str:
    return PEER_WORDS.get(state, state)


def health_problems(before: dict[str, Any] | None, now: dict[str, Any] | None,
                    max_pending_acks: int) -> list[str]:
    """Why a node is not healthy, from two STATS answers a moment apart."""
    if now is None or before is None:
        return ["no answer"]
    problems = []
    if now.get("store_write_failing", 0):  # (with nobody producing, no message refused)
        failing = human.duration(now.get("store_write_failing_s", 0))
        problems.append(f"store writes are failing (for {failing})")
    elif now.get("store_failures", 0) > before.get("store_failures", 0):
        problems.append("store writes are failing")
    archive = now.get("archive", {})
    if archive.get("write_failing", 0):  # (with no consumer ACKing, no failure counted)
        failing = human.duration(archive.get("write_failing_s", 0))
        problems.append(f"archive writes are failing (for {failing})")
    elif archive.get("failures", 0) > before.get("archive", {}).get("failures", 0):
        problems.append("archive writes are failing")
    if now.get("pending_producer_acks", 0) > max_pending_acks:
        problems.append(f"{now['pending_producer_acks']} producer ACKs cannot be sent")
    # silent; stopped by SIGTERM (a planned stop, but away all the same); heard, but our
    # link gets no answer
    for state in ("down", "left", "unreachable"):
        peers = [peer["endpoint"] for peer in now.get("peers", []) if peer["state"] == state]
        if peers:
            problems.append(f"peer {peer_words(state)}: " + ", ".join(peers))
    return problems


def make_argument_parser() -> argparse.ArgumentParser:
    parser = ToolParser("pzq-monitor", __doc__)
    parser.add_argument("--dsn", type=endpoint, action="append",
                        help=f"a node's --monitor-dsn, repeatable (default: {DEFAULT_MONITOR})")
    parser.add_argument("--json", action="store_true",
                        help="print STATS as JSON; with --watch one line per refresh")
    parser.add_argument("--watch", action="store_true",
                        help="a live view until Ctrl-C (or --iterations); exits 3, as "
                             "--check, when its last look found a node down")
    parser.add_argument("--interval", type=positive_seconds, default=1.0, metavar="SECONDS",
                        help="seconds between polls")
    parser.add_argument("--iterations", type=whole_number(0), default=0, metavar="N",
                        help="with --watch: stop after N refreshes (0: never)")
    parser.add_argument("--check", action="store_true", help="exit 0 only when healthy")
    parser.add_argument("--max-pending-acks", type=whole_number(0), default=10_000, metavar="N",
                        help="--check: more producer ACKs waiting than this is unhealthy")
    parser.add_argument("--command", metavar="COMMAND", type=monitor_command,
                        help="send this command and print the raw answer")
    parser.add_argument("--timeout", type=positive_seconds, default=5.0, metavar="SECONDS",
                        help="seconds to wait for each node")
    add_curve_options(parser)
    return parser


def monitor_command(text: str) -> str:
    """An argparse type: a command to send; an empty one would be answered with an error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a command, e.g. MONITOR, STATS or PING")
    return text


@quiet_on_closed_pipe
@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    curve = curve_from(parser, args)
    dsns = args.dsn or [DEFAULT_MONITOR]
    if args.command is not None:
        return raw_command(dsns, args.command, args.timeout, curve)
    if args.check:
        return check(dsns, args, curve)
    if args.watch:
        return watch(dsns, args, curve)
    answers = fetch_all(dsns, args.timeout, curve, notice=say_waiting)
    if args.json:
        print(json.dumps(as_json(answers), indent=2, sort_keys=True))
    else:
        console().print(views(answers))  # a node down shows as DOWN, the reason on stderr
        report_down(answers)
    return EXIT_OK if all(answer.up for answer in answers) else EXIT_NO_ANSWER


def fetch_all(dsns: Sequence[str], timeout: float, curve: ClientSecurity,
              notice: Callable[[str], None] | None = None) -> list[StatsAnswer]:
    return [fetch_stats(dsn, timeout, curve, notice) for dsn in dsns]


def say_waiting(text: str) -> None:
    """After a second without an answer, what is awaited (not in a live view: it
    would write across the screen, which shows why above its table)."""
    print(f"pzq-monitor: {text}", file=sys.stderr, flush=True)


def console() -> Console:
    """A terminal's width on a terminal; piped, as wide as the table needs."""
    return Console() if sys.stdout.isatty() else Console(width=1000)


def report_down(answers: Sequence[StatsAnswer]) -> None:
    for answer in answers:
        if not answer.up:
            print(f"pzq-monitor: {answer.error}", file=sys.stderr)


def raw_command(dsns: list[str], command: str, timeout: float,
                curve: ClientSecurity) -> int:
    for dsn in dsns:
        try:
            reply = request_monitor(dsn, command, timeout, curve, say_waiting)
        except EndpointError as exc:
            return fail("pzq-monitor", str(exc), EXIT_USAGE)
        except TimeoutError as exc:
            return fail("pzq-monitor", str(exc), EXIT_NO_ANSWER)
        print(reply.decode(errors="replace").rstrip("\n"))
        if reply.startswith(b"ERROR"):
            return EXIT_UNHEALTHY
    return EXIT_OK


def check(dsns: list[str], args: argparse.Namespace, curve: ClientSecurity) -> int:
    before = fetch_all(dsns, args.timeout, curve, notice=say_waiting)
    if all(answer.up for answer in before):
        time.sleep(min(args.interval, 1.0))  # two looks, to see failure counts move
    worst = EXIT_OK
    for first in before:
        now = fetch_stats(first.dsn, args.timeout, curve) if first.up else first
        problems = health_problems(first.stats, now.stats, args.max_pending_acks)
        if now.error:
            problems = [now.error]
        if problems:
            print(f"{first.dsn}: unhealthy: {'; '.join(problems)}", file=sys.stderr)
            worst = max(worst, EXIT_NO_ANSWER if now.error else EXIT_UNHEALTHY)
        else:
            print(f"{first.dsn}: healthy")
    return worst


def watch(dsns: list[str], args: argparse.Namespace, curve: ClientSecurity) -> int:
    """Refresh until --iterations or Ctrl-C; exit as --check does (3) when the last look
    found a node down, so a script's bounded watch can tell."""
    last: list[StatsAnswer] = []  # the last look's answers, as each comes
    try:
        if args.json:
            watch_json(dsns, args, curve, last)
        else:
            watch_table(dsns, args, curve, last)
    except KeyboardInterrupt:
        pass
    return EXIT_OK if all(answer.up for answer in last) else EXIT_NO_ANSWER


def _refreshes(args: argparse.Namespace) -> Iterator[int]:
    refreshes = 0
    while not args.iterations or refreshes < args.iterations:
        if refreshes:
            time.sleep(args.interval)  # the refresh period of a live view
        yield refreshes
        refreshes += 1


def watch_json(dsns: list[str], args: argparse.Namespace, curve: ClientSecurity,
               last: list[StatsAnswer]) -> None:
    for _ in _refreshes(args):
        # stdout stays JSON; a node late by a second is said on stderr
        last[:] = fetch_all(dsns, args.timeout, curve, notice=say_waiting)
        print(json.dumps(as_json(last), sort_keys=True), flush=True)


def watch_table(dsns: list[str], args: argparse.Namespace, curve: ClientSecurity,
                last: list[StatsAnswer]) -> None:
    history: dict[str, deque[float]] = {dsn: deque(maxlen=HISTORY) for dsn in dsns}
    shown: list[RenderableType] = [Text("")]  # the last look's view, below a wait's line

    with Live(console=console(), auto_refresh=False,
              screen=args.iterations == 0 and sys.stdout.isatty()) as live:
        def say_in_view(text: str) -> None:
            # on top: a table taller than the terminal loses its bottom lines
            live.update(Group(Text(text, style="italic"), shown[0]), refresh=True)

        # at a terminal the view says what it waits for: a line to stderr would be
        # drawn across it; piped, the view comes at the end, so stderr says it
        notice = say_in_view if live.console.is_terminal else say_waiting
        for _ in _refreshes(args):
            answers = fetch_all(dsns, args.timeout, curve, notice=notice)
            last[:] = answers
            for answer in answers:
                history[answer.dsn].append(answer.stats["messages"] if answer.stats else 0)
            shown[0] = views(answers, history)
            live.update(shown[0], refresh=True)


def views(answers: Sequence[StatsAnswer],
          history: dict[str, deque[float]] | None = None) -> RenderableType:
    """The node table, and the topics and groups table when a node has a topic."""
    groups = topics_table(answers)
    parts: list[RenderableType] = [table(answers, history)]
    if groups is not None:
        parts.append(groups)
    down = [str(answer.error) for answer in answers if not answer.up]
    if history is not None and down:
        # a live view: nothing goes to stderr, so say why here, on top, where a
        # terminal shorter than the tables still shows it
        parts.insert(0, Text("\n".join(down), style="red"))
    return parts[0] if len(parts) == 1 else Group(*parts)
