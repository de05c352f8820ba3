"""``pzq-ctl``: administer a node over its monitor socket (dead letters, pending, a
backup), and repair a stopped node's damaged store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pzq.cli.common import (
    DEFAULT_MONITOR,
    add_curve_options,
    curve_from,
    duration_or_none,
    endpoint,
    fail,
    moment_us,
    name_of,
    positive_duration,
    positive_seconds,
    start_position,
    tool_parser,
    whole_number,
)
from pzq.cli.ctl_backup import run_backup
from pzq.cli.routes_text import routes_text
from pzq.client import request_monitor
from pzq.cluster.placement import MOST_PARTITIONS
from pzq.errors import DecodeError, EndpointError, ExitCode, StoreError
from pzq.protocol.consume import START_WORDS
from pzq.protocol.message_keys import parse_message_key
from pzq.replay.range import parse_bound
from pzq.store.repair import repair
from pzq.store.topic_model import MOST_BACKOFF_STEPS, ON_EXPIRE
from pzq.tool_base import quiet_on_closed_pipe, quiet_on_interrupt, sigterm_as_interrupt

ACTIONS = ("declare", "remove", "empty")

DEFAULT_TIMEOUT_S = 10.0


def make_argument_parser() -> argparse.ArgumentParser:
    parser = tool_parser("pzq-ctl", "Administer a node over its monitor socket.")
    _node_options(parser, DEFAULT_MONITOR, DEFAULT_TIMEOUT_S)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("dead", help="list dead letters")
    listing.add_argument("--limit", type=whole_number(0), default=100, metavar="N",
                         help="list at most this many")
    for name, what in (("requeue", "deliver again"), ("purge", "delete for good")):
        command = commands.add_parser(name, help=f"{what}: one dead letter, or all")
        command.add_argument("key", type=dead_letter_key, help="a dead letter's key, or ALL")
    commands.add_parser("pending", help="stored, in-flight and dead counts")
    routes = commands.add_parser("routes", help="the route table: every node's endpoints and "
                                 "each partitioned topic's owner per partition")
    routes.add_argument("--json", action="store_true", help="print the table as JSON")
    _topic_commands(commands)
    backing_up = commands.add_parser(
        "backup", help="copy the running node's store and archive into DIR (new or empty, "
                       "on the node's host), waiting for the end")
    backing_up.add_argument("directory", type=Path, metavar="DIR",
                            help="where the node writes the backup, on its host")
    for command in commands.choices.values():
        # The same options after the command (pzq-ctl pending --dsn ...); unset there,
        # they leave what was given before it.
        _node_options(command, argparse.SUPPRESS, argparse.SUPPRESS)
        add_curve_options(command, default=argparse.SUPPRESS)
    repairing = commands.add_parser(
        "repair", help="run LevelDB's repair on a stopped node's store (no --dsn needed)")
    repairing.add_argument("--database", type=Path, default=Path("./pzq-data"),
                           help="the node's --database")
    return parser


@quiet_on_closed_pipe
@quiet_on_interrupt
@sigterm_as_interrupt
def ctl_main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    check_options(parser, args)
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
    # A command's own copies have no default (they keep what came before the command), so
    # their help names the tool's.
    told = dsn == argparse.SUPPRESS
    parser.add_argument("--dsn", type=endpoint, default=dsn,
                        help="the node's --monitor-dsn"
                             + (f" (default: {DEFAULT_MONITOR})" if told else ""))
    parser.add_argument("--timeout", type=positive_seconds, default=timeout, metavar="SECONDS",
                        help="seconds to wait for the answer"
                             + (f" (default: {DEFAULT_TIMEOUT_S})" if told else ""))


def _topic_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    commands.add_parser("topics", help="every topic: messages, bytes, groups")
    topic = commands.add_parser("topic", help="declare, remove or empty a topic")
    topic.add_argument("action", choices=ACTIONS)
    topic.add_argument("name", type=name_of("topic"), help="the topic")
    topic.add_argument("--max-messages", type=whole_number(0), default=None, metavar="N",
                       help="declare: QUEUE_FULL for this topic beyond N messages (0: none)")
    topic.add_argument("--max-bytes", type=whole_number(0), default=None, metavar="B",
                       help="declare: QUEUE_FULL for this topic beyond B bytes (0: none)")
    topic.add_argument("--dedup-window", type=positive_duration, default=None, metavar="D",
                       help="declare: how long the topic remembers a DEDUP-ID (e.g. 10m; "
                            "the node's --dedup-window when not set)")
    topic.add_argument("--max-age", type=duration_or_none, default=None, metavar="D",
                       help="declare: a message of the topic older than this expires "
                            "(e.g. 1h; never delivered after, see --on-expire; 0: none)")
    topic.add_argument("--on-expire", choices=ON_EXPIRE, default=None,
                       help="declare: an expired message goes to the dead letters (dead, "
                            "the default) or is deleted (drop)")
    topic.add_argument("--priorities", action="store_const", const="on", default=None,
                       help="declare: a message's PRIORITY header (1-9, 9 first) puts it "
                            "before the topic's backlog")
    topic.add_argument("--no-priorities", dest="priorities", action="store_const",
                       const="off", help="declare: take the topic's priorities away (its "
                                         "messages go in the order they came)")
    topic.add_argument("--partitions", type=whole_number(1, MOST_PARTITIONS), default=None,
                       metavar="P",
                       help="declare: split the topic over the cluster's nodes in P "
                            "partitions (a KEY's messages stay in one, in order); fixed "
                            "once declared")
    group = commands.add_parser("group", help="declare, remove, empty, seek a consumer group, "
                                "list its pending deliveries, or replay its archive")
    group.add_argument("action", choices=(*ACTIONS, "pending", "seek", "replay", "replays"))
    group.add_argument("topic", nargs="?", type=name_of("topic"),
                       help="the topic (replays: only its replays; replay --cancel: none)")
    group.add_argument("name", nargs="?", type=name_of("group"),
                       help="the group's name (replays: none)")
    group.add_argument("--start", type=start_position, default=None, metavar="WHERE",
                       help="declare: earliest (default), latest, or a time (ISO 8601, "
                            "or µs since the epoch)")
    group.add_argument("--filter", default=None, metavar="TAG",
                       help="declare: a TAG, or a prefix ending in '*'")
    group.add_argument("--ack-timeout", type=positive_duration, default=None, metavar="D",
                       help="declare: the group's own ack timeout (e.g. 5m)")
    group.add_argument("--max-deliveries", type=whole_number(0), default=None, metavar="N",
                       help="declare: the group's own --max-deliveries (0: no limit)")
    group.add_argument("--backoff", type=backoff_steps, default=None, metavar="D,D,...",
                       help="declare: waits before a delivery whose deadline passed goes "
                            "again, one per delivery, the last repeated (e.g. 1s,10s,1m)")
    group.add_argument("--limit", type=whole_number(0), default=None, metavar="N",
                       help="pending: at most N lines (100)")
    group.add_argument("--from", dest="replay_from", type=replay_bound(True), default=None,
                       metavar="WHERE",
                       help="replay: deliver the topic's archive to the group again from "
                            "earliest, a time (ISO 8601, or µs since the epoch) or an "
                            "archive byte offset")
    group.add_argument("--to", type=seek_or_replay_end, default=None, metavar="WHERE",
                       help="seek: earliest, latest, a time (ISO 8601, or µs since the "
                            "epoch), or a message key; replay: up to this time or archive "
                            "offset (the archive's end)")
    group.add_argument("--cancel", default=None, metavar="ID",
                       help="replay: cancel the replay ID (as replays lists it)")


# The options of `topic` and `group` that one action alone takes, by argparse dest.
ONE_ACTIONS_OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "topic": {"declare": ("max_messages", "max_bytes", "dedup_window", "partitions",
                          "max_age", "on_expire", "priorities")},
    "group": {"declare": ("start", "filter", "ack_timeout", "max_deliveries", "backoff"),
              "pending": ("limit",), "replay": ("replay_from", "cancel")},
}
GROUPLESS = ("replays",)  # group actions without TOPIC and NAME


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2, naming the option, for one given to an action that does not take it and
    for a seek without --to: the node would refuse them in its own words."""
    for action, dests in ONE_ACTIONS_OPTIONS.get(args.command, {}).items():
        for dest in dests:
            if getattr(args, dest) is not None and args.action != action:
                flag = _flag_given(dest, getattr(args, dest))
                parser.error(f"{flag} is for {args.command} {action} "
                             f"only, not {args.command} {args.action}")
    if args.command == "group":
        _check_group(parser, args)


def _flag_given(dest: str, value: object) -> str:
    """The option the user typed for ``dest`` (--no-priorities sets priorities too)."""
    if dest == "replay_from":
        return "--from"
    if dest == "priorities" and value == "off":
        return "--no-priorities"
    return f"--{dest.replace('_', '-')}"


def _check_group(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The words of one group action: its names, --to's form, replay's --from or
    --cancel."""
    action = args.action
    if args.to is not None and action not in ("seek", "replay"):
        parser.error(f"--to is for group seek and group replay only, not group {action}")
    if action == "replays":
        if args.name is not None:
            parser.error("group replays takes at most a TOPIC")
        return
    if action == "replay" and args.cancel is not None:
        if args.topic is not None or args.replay_from is not None or args.to is not None:
            parser.error("group replay --cancel ID takes no TOPIC, GROUP, --from or --to")
        return
    if args.topic is None or args.name is None:
        parser.error(f"group {action} needs TOPIC and NAME")
    if action == "seek":
        if args.to is None:
            parser.error("group seek needs --to WHERE: earliest, latest, a time (ISO 8601 or "
                         "µs since the epoch) or a message key")
        args.to = _argument(parser, seek_target, args.to, "--to")
    elif action == "replay":
        _check_replay(parser, args)


def _check_replay(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.replay_from is None:
        parser.error("group replay needs --from WHERE: earliest, a time or an archive "
                     "offset (or --cancel ID)")
    if args.to is not None:
        _argument(parser, replay_bound(False), args.to, "--to")


def _argument(parser: argparse.ArgumentParser, kind: Callable[[str], str], text: str,
              flag: str) -> str:
    try:
        return kind(text)
    except argparse.ArgumentTypeError as exc:
        parser.error(f"argument {flag}: {exc}")  # (a long value cut by error())


def replay_bound(earliest_ok: bool) -> Callable[[str], str]:
    """An argparse type: where a replay begins (``earliest_ok``) or ends, as the node
    reads it."""
    def bound(text: str) -> str:
        try:
            parse_bound(text, "from" if earliest_ok else "to", earliest_ok)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return bound


def seek_or_replay_end(text: str) -> str:
    """An argparse type: where a seek goes or a replay ends (which one: the action's,
    which reads it again: the text as given)."""
    try:
        seek_target(text)
        return text
    except argparse.ArgumentTypeError:
        try:
            return replay_bound(False)(text)
        except argparse.ArgumentTypeError:
            pass
        raise


def seek_target(text: str) -> str:
    """An argparse type: where a seek goes (the node finds the message or time), as
    the node reads it: an ISO 8601 time, which a replay takes, in µs since the epoch."""
    if text in START_WORDS or text.isdigit():
        return text
    try:
        parse_message_key(text.encode())
    except DecodeError:
        pass
    else:
        return text
    try:
        return str(moment_us(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text} is not earliest, latest, a time (ISO 8601 or µs since the epoch) or a "
            "message key") from None


def backoff_steps(text: str) -> str:
    """An argparse type: 1 to MOST_BACKOFF_STEPS durations above 0, separated by ','."""
    steps = text.split(",")
    if not 0 < len(steps) <= MOST_BACKOFF_STEPS or "" in steps:  # 1s,,10s: a step lost?
        raise argparse.ArgumentTypeError(f"{text}: give 1 to {MOST_BACKOFF_STEPS} durations "
                                         "separated by ',', e.g. 1s,10s,1m")
    for step in steps:
        positive_duration(step)
    return text


def dead_letter_key(text: str) -> str:
    """An argparse type: a dead letter's message key, or ALL."""
    if text.upper() == "ALL":
        return text
    try:
        parse_message_key(text.encode())
    except DecodeError:
        raise argparse.ArgumentTypeError(f"{text} is not a message key (as dead lists "
                                         "them) or ALL") from None
    return text


def _request(args: argparse.Namespace) -> str:
    """The monitor command for the tool's command line."""
    if args.command == "topic":
        return " ".join([args.action.upper(), "TOPIC", args.name,
                         *_options(max_messages=args.max_messages, max_bytes=args.max_bytes,
                                   dedup_window=args.dedup_window,
                                   partitions=args.partitions, max_age=args.max_age,
                                   on_expire=args.on_expire, priorities=args.priorities)])
    if args.command == "group" and args.action in ("replay", "replays"):
        return _replay_request(args)
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


def _replay_request(args: argparse.Namespace) -> str:
    if args.action == "replays":
        return " ".join(["REPLAYS", *([args.topic] if args.topic else [])])
    if args.cancel is not None:
        return f"REPLAY CANCEL {args.cancel}"
    return " ".join(["REPLAY", "GROUP", args.topic, args.name,
                     *_options(**{"from": args.replay_from, "to": args.to})])


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
