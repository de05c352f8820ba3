"""Command-line tools over pzq.client: pzq-produce, pzq-consume, pzq-ctl, pzq-keygen.

pzq-monitor lives in pzq.monitor_cli; ``request_monitor`` (pzq.monitor_client) serves them all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from pzq import security
from pzq.protocol import frames as wire
from pzq.client import Consumer, Producer
from pzq.errors import EndpointError
from pzq.monitor_client import monitor_figures, request_monitor
from pzq.tool_args import (
    EXIT_USAGE,
    ToolParser,
    add_curve_options,
    curve_from,
    endpoint,
    fail,
    positive_seconds,
)
from pzq.waiting import AckWait, DeliveryWait

__all__ = [
    "consume_main",
    "ctl_main",
    "keygen_main",
    "monitor_figures",
    "produce_main",
    "request_monitor",
]

EXIT_OK = 0
EXIT_FAILURE = 1  # some message was refused, or the node did not answer in time
EXIT_EXISTS = 3  # pzq-keygen: the key pair is there already (give --force)
EXIT_INTERRUPTED = 130  # Ctrl-C: stopped where it was, as a shell expects

DEFAULT_RECEIVE = "tcp://127.0.0.1:11131"
DEFAULT_SEND = "tcp://127.0.0.1:11132"
DEFAULT_MONITOR = "ipc:///tmp/pzq-monitor"


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = ToolParser(prog, description)
    add_curve_options(parser)
    return parser


def produce_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser("pzq-produce", "Send each input line as one message; report the ACKs.")
    parser.add_argument("--dsn", type=endpoint, default=DEFAULT_RECEIVE,
                        help="the node's --receive-dsn")
    parser.add_argument("--window", type=int, default=100, metavar="N", help="messages sent ahead of ACKs")
    parser.add_argument("--header", action="append", default=[], metavar="NAME:value",
                        help="a header frame for every message, e.g. TOPIC:orders (repeatable)")
    parser.add_argument("--timeout", type=positive_seconds, default=30.0, metavar="SECONDS",
                        help="seconds to wait for ACKs")
    parser.add_argument("file", nargs="?", type=argparse.FileType("rb"), default=sys.stdin.buffer,
                        help="lines to send (default: standard input)")
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error("--window must be at least 1")
    for header in args.header:
        if not wire.HEADER_PATTERN.match(header.encode()):
            parser.error(f"--header {header} is not NAME:value, e.g. TOPIC:orders")
    curve = curve_from(parser, args)
    with Producer(args.dsn, window=args.window, curve=curve) as producer:
        return _produce_lines(producer, args, curve is not None)


def _produce_lines(producer: Producer, args: argparse.Namespace, curve: bool) -> int:
    headers = [header.encode() for header in args.header]
    waiting = AckWait(producer, "pzq-produce", args.dsn, args.timeout, curve)
    failed = 0
    try:
        for line in args.file:
            waiting.send([line.rstrip(b"\n")], headers)
            failed += _report_acks(producer.acks())
        failed += _report_acks(waiting.flush())
    except TimeoutError as exc:
        return fail("pzq-produce", str(exc), EXIT_FAILURE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK if failed == 0 else EXIT_FAILURE


def _report_acks(acks: list[wire.ProducerAck]) -> int:
    """Print one line per ACK; returns how many were failures."""
    for ack in acks:
        status = "ok" if ack.ok else "failed"
        detail = f" {ack.status_message.decode(errors='replace')}" if ack.status_message else ""
        print(f"{ack.msg_id.decode(errors='replace')} {status}{detail}", flush=True)
    return sum(not ack.ok for ack in acks)


def consume_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser("pzq-consume", "Print delivered messages and ACK them.")
    parser.add_argument("--dsn", type=endpoint, action="append",
                        help=f"a node's --send-dsn, repeatable (default: {DEFAULT_SEND})")
    parser.add_argument("--count", type=int, default=0, metavar="N",
                        help="stop after N messages; 0 for no limit")
    parser.add_argument("--no-ack", action="store_true", help="print without ACKing")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="SECONDS",
                        help="fail (exit 1) when nothing is delivered within this many seconds "
                             "(default: wait forever)")
    parser.add_argument("--idle-timeout", type=positive_seconds, default=None,
                        metavar="SECONDS",
                        help="stop (exit 0) when nothing arrives for this many seconds")
    args = parser.parse_args(argv)
    dsns = args.dsn or [DEFAULT_SEND]
    curve = curve_from(parser, args)
    with Consumer(dsns, curve=curve) as consumer:
        waiting = DeliveryWait(consumer, "pzq-consume", dsns, curve is not None)
        try:
            received = _print_messages(waiting, args)
        except TimeoutError as exc:
            return fail(parser.prog, str(exc), EXIT_FAILURE)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    if received == 0 and not waiting.anyone_answers():
        return fail(parser.prog, waiting.nothing_answers(), EXIT_FAILURE)
    return EXIT_OK


def _print_messages(waiting: DeliveryWait, args: argparse.Namespace) -> int:
    received = 0
    message = waiting.first(args.timeout, args.idle_timeout)
    while message is not None:
        body = b" ".join(message.parts).decode(errors="replace")
        count = "" if message.deliveries is None else f" deliveries={message.deliveries}"
        print(f"{message.key.decode()}{count} {body}", flush=True)
        if not args.no_ack:
            message.ack()
        received += 1
        if args.count and received >= args.count:
            break
        message = waiting.next(args.idle_timeout)
    return received


def ctl_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser("pzq-ctl", "Administer a node over its monitor socket.")
    parser.add_argument("--dsn", type=endpoint, default=DEFAULT_MONITOR,
                        help="the node's --monitor-dsn")
    parser.add_argument("--timeout", type=positive_seconds, default=10.0, metavar="SECONDS",
                        help="seconds to wait for the answer")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("dead", help="list dead letters")
    listing.add_argument("--limit", type=int, default=100, metavar="N", help="list at most this many")
    for name, what in (("requeue", "deliver again"), ("purge", "delete for good")):
        command = commands.add_parser(name, help=f"{what}: one dead letter, or all")
        command.add_argument("key", help="a dead letter's key, or ALL")
    commands.add_parser("pending", help="stored, in-flight and dead counts")
    args = parser.parse_args(argv)
    request = {"dead": f"DEAD {getattr(args, 'limit', '')}",
               "requeue": f"REQUEUE {getattr(args, 'key', '')}",
               "purge": f"PURGE {getattr(args, 'key', '')}",
               "pending": "PENDING"}[args.command]
    try:
        reply = request_monitor(args.dsn, request, args.timeout, curve_from(parser, args))
    except EndpointError as exc:
        return fail(parser.prog, str(exc), EXIT_USAGE)
    except TimeoutError as exc:
        return fail(parser.prog, str(exc), EXIT_FAILURE)
    text = reply.decode(errors="replace").rstrip("\n")
    if reply.startswith(b"ERROR"):
        print(f"pzq-ctl: {text}", file=sys.stderr)
        return EXIT_FAILURE
    print(text)
    return EXIT_OK


def keygen_main(argv: Sequence[str] | None = None) -> int:
    parser = ToolParser("pzq-keygen", "Make a CURVE key pair for a node or a client.")
    parser.add_argument("directory", help="where to write NAME.key and NAME.key_secret")
    parser.add_argument("name", help="the pair's name, e.g. node or producer-1")
    parser.add_argument("--force", action="store_true",
                        help="replace a key pair of that name (clients holding the old "
                             "public key are locked out)")
    args = parser.parse_args(argv)
    existing = [path for path in security.key_pair_paths(args.directory, args.name)
                if path.exists()]
    if existing and not args.force:
        return fail(parser.prog, f"{existing[0]} exists; give --force to replace the key pair",
                    EXIT_EXISTS)
    try:
        public, secret = security.generate(args.directory, args.name)
    except OSError as exc:
        return fail(parser.prog, f"cannot write keys in {Path(args.directory)}: "
                                 f"{exc.strerror}", EXIT_FAILURE)
    print(f"public key (authorize it, give it to clients): {public}")
    print(f"secret key (keep it private): {secret}")
    return EXIT_OK
