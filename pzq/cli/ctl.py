"""``pzq-ctl``: administer a node over its monitor socket (dead letters, pending, a
backup), and repair a stopped node's damaged store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pzq.cli.common import (
    DEFAULT_MONITOR,
    add_curve_options,
    curve_from,
    endpoint,
    fail,
    positive_seconds,
    tool_parser,
)
from pzq.cli.ctl_backup import run_backup
from pzq.cli.routes_text import routes_text
from pzq.client import request_monitor
from pzq.errors import EndpointError, ExitCode, StoreError
from pzq.store.repair import repair
from pzq.tool_base import quiet_on_closed_pipe

ACTIONS = ("declare", "remove", "empty")


@quiet_on_closed_pipe
def ctl_main(argv: Sequence[str] | None = None) -> int:
    parser = tool_parser("pzq-ctl", "Administer a node over its monitor socket.")
    _node_options(parser, DEFAULT_MONITOR, 10.0)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("dead", help="list dead letters")
    listing.add_argument("--limit", type=int, default=100, metavar="N",
                         help="list at most this many")
    for name, what in (("requeue", "deliver again"), ("purge", "delete for good")):
        command = commands.add_parser(name, help=f"{what}: one dead letter, or all")
        command.add_argument("key", help="a dead letter's key, or ALL")
    commands.add_parser("pending", help="stored, in-flight and dead counts")
    routes = commands.add_parser("routes", help="the route table: every node's endpoints and "
                                 "each partitioned topic's owner per partition")
    routes.add_argument("--json", action="store_true", help="print the table as JSON")
    _topic_commands(commands)
    backing_up = commands.add_parser(
        "backup", help="copy the running node's store and archive into DIR (new or empty, "
                       "on the node's host), waiting for the end")
    backing_up.add_argument("directory", type=Path, metavar="DIR")
    for command in commands.choices.values():
        # The same options after the command (pzq-ctl pending --dsn ...); unset there,
        # they leave what was given before it.
        _node_options(command, argparse.SUPPRESS, argparse.SUPPRESS)
        add_curve_options(command, default=argparse.SUPPRESS)
    repairing = commands.add_parser(
        "repair", help="run LevelDB's repair on a stopped node's store (no --dsn needed)")
    repairing.add_argument("--database", type=Path, default=Path("./pzq-data"),
                           help="the node's --database")
    args = parser.parse_args(argv)
    if args.command == "repair":
        return _repair(parser.prog, args.database)
    if args.command == "backup":
        return run_backup(parser.prog, args.dsn, args.directory, args.timeout,
                          curve_from(parser, args))
    request = _request(args)
    try:
        reply = request_monitor(args.dsn, request, args.timeout, curve_from(parser, args),
                                notice=lambda text: print(f"pzq-ctl: {text}", file=sys.stderr,
                                                          flush=True))
    except EndpointError as exc:
        return fail(parser.prog, str(exc), ExitCode.USAGE)
    except TimeoutError as exc:
        return fail(parser.prog, str(exc), ExitCode.FAILURE)
    text = reply.decode(errors="replace").rstrip("\n")
    if reply.startswith(b"ERROR"):
        print(f"pzq-ctl: {text}", file=sys.stderr)
        return ExitCode.FAILURE
    print(routes_text(reply) if args.command == "routes" and not args.json else text)
    return ExitCode.OK


def _node_options(parser: argparse.ArgumentParser, dsn: str, timeout: object) -> None:
    parser.add_argument("--dsn", type=endpoint, default=dsn, help="the node's --monitor-dsn")
    parser.add_argument("--timeout", type=positive_seconds, default=timeout, metavar="SECONDS",
                        help="seconds to wait for the answer")


def _topic_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    commands.add_parser("topics", help="every topic: messages, bytes, groups")
    topic = commands.add_parser("topic", help="declare, remove or empty a topic")
    topic.add_argument("action", choices=ACTIONS)
    topic.add_argument("name")
    topic.add_argument("--max-messages", type=int, default=None, metavar="N",
                       help="declare: QUEUE_FULL for this topic beyond N messages (0: none)")
    topic.add_argument("--max-bytes", type=int, default=None, metavar="B",
                       help="declare: QUEUE_FULL for this topic beyond B bytes (0: none)")
    topic.add_argument("--dedup-window", default=None, metavar="D",
                       help="declare: how long the topic remembers a DEDUP-ID (e.g. 10m; "
                            "the node's --dedup-window when not set)")
    topic.add_argument("--partitions", type=int, default=None, metavar="P",
                       help="declare: split the topic over the cluster's nodes in P "
                            "partitions (a KEY's messages stay in one, in order); fixed "
                            "once declared")
    group = commands.add_parser("group", help="declare, remove, empty, seek a consumer group, "
                                "or list its pending deliveries")
    group.add_argument("action", choices=(*ACTIONS, "pending", "seek"))
    group.add_argument("topic")
    group.add_argument("name")
    group.add_argument("--start", default=None, metavar="WHERE",
                       help="declare: earliest (default), latest, or µs since the epoch")
    group.add_argument("--filter", default=None, metavar="TAG",
                       help="declare: a TAG, or a prefix ending in '*'")
    group.add_argument("--ack-timeout", default=None, metavar="D",
                       help="declare: the group's own ack timeout (e.g. 5m)")
    group.add_argument("--max-deliveries", type=int, default=None, metavar="N",
                       help="declare: the group's own --max-deliveries (0: no limit)")
    group.add_argument("--backoff", default=None, metavar="D,D,...",
                       help="declare: waits before a delivery whose deadline passed goes "
                            "again, one per delivery, the last repeated (e.g. 1s,10s,1m)")
    group.add_argument("--to", default=None, metavar="WHERE",
                       help="seek: earliest, latest, µs since the epoch, or a message key")
    group.add_argument("--limit", type=int, default=None, metavar="N",
                       help="pending: at most N lines (100)")


def _request(args: argparse.Namespace) -> str:
    """The monitor command for the tool's command line."""
    if args.command == "topic":
        return " ".join([args.action.upper(), "TOPIC", args.name,
                         *_options(max_messages=args.max_messages, max_bytes=args.max_bytes,
                                   dedup_window=args.dedup_window,
                                   partitions=args.partitions)])
    if args.command == "group":
        return " ".join([args.action.upper(), "GROUP", args.topic, args.name,
                         *_options(start=args.start, filter=args.filter, to=args.to,
                                   limit=args.limit, ack_timeout=args.ack_timeout,
                                   max_deliveries=args.max_deliveries,
                                   backoff=args.backoff)])
    return {"dead": f"DEAD {getattr(args, 'limit', '')}",
            "requeue": f"REQUEUE {getattr(args, 'key', '')}",
            "purge": f"PURGE {getattr(args, 'key', '')}",
            "pending": "PENDING", "topics": "TOPICS", "routes": "ROUTES"}[args.command]


def _options(**options: object) -> list[str]:
    return [f"{name}={value}" for name, value in options.items() if value is not None]


def _repair(prog: str, database: Path) -> int:
    try:
        report = repair(database)
    except StoreError as exc:
        return fail(prog, str(exc), ExitCode.STORE)
    before = (f"it did not open or read whole ({report.damage})" if report.damage
              else "it opened and read whole")
    print(f"repaired {database}: {before}; now {report.messages} messages and "
          f"{report.dead_letters} dead letters are readable")
    return ExitCode.OK


if __name__ == "__main__":
    raise SystemExit(ctl_main())
