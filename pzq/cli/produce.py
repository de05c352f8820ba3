"""``pzq-produce``: send each input line as one message and print its ACK."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pzq.cli.common import (
    curve_from,
    endpoint,
    fail,
    positive_seconds,
    tool_parser,
)
from pzq.cli.waiting import AckWait
from pzq.client import Producer, RoutedProducer
from pzq.client.producer import topic_headers
from pzq.errors import ExitCode
from pzq.protocol import frames as wire
from pzq.protocol.headers import KEY_HEADER
from pzq.tool_base import quiet_on_closed_pipe

DEFAULT_RECEIVE = "tcp://127.0.0.1:11131"


@quiet_on_closed_pipe
def produce_main(argv: Sequence[str] | None = None) -> int:
    parser = tool_parser("pzq-produce", "Send each input line as one message; report the ACKs.")
    parser.add_argument("--dsn", type=endpoint, default=DEFAULT_RECEIVE,
                        help="the node's --receive-dsn")
    parser.add_argument("--window", type=int, default=100, metavar="N",
                        help="messages sent ahead of ACKs")
    parser.add_argument("--header", action="append", default=[], metavar="NAME:value",
                        help="a header frame for every message, e.g. TOPIC:orders (repeatable)")
    parser.add_argument("--topic", help="the topic of every message (a TOPIC header)")
    parser.add_argument("--tag", help="the tag of every message (a TAG header)")
    parser.add_argument("--key", help="the partition key of every message (a KEY header)")
    parser.add_argument("--key-from-line", action="store_true",
                        help="each line is KEY<tab>body: the key of that message (a line "
                             "without a tab stops the tool, exit 2)")
    parser.add_argument("--routes", type=endpoint, action="append", metavar="MONITOR",
                        help="a node's --monitor-dsn (repeatable): send each message to "
                             "the owner of its partition, learned from the route table "
                             "(needs --topic)")
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
    if args.routes and not args.topic:
        parser.error("--routes needs --topic (the partitioned topic)")
    if args.key is not None and args.key_from_line:
        parser.error("--key and --key-from-line go alone: one key for all, or one a line")
    curve = curve_from(parser, args)
    if args.routes:
        try:
            routed = RoutedProducer(args.routes, args.topic, window=args.window, curve=curve)
        except TimeoutError as exc:
            return fail("pzq-produce", str(exc), ExitCode.FAILURE)
        with routed:
            return _produce_lines(routed, args, ", ".join(args.routes), curve is not None)
    with Producer(args.dsn, window=args.window, curve=curve) as producer:
        return _produce_lines(producer, args, args.dsn, curve is not None)


def _produce_lines(producer: Producer | RoutedProducer, args: argparse.Namespace, dsn: str,
                   curve: bool) -> int:
    headers = [header.encode() for header in args.header]
    headers += topic_headers(None if args.routes else args.topic, args.tag)
    if args.key is not None:
        headers.append(KEY_HEADER + args.key.encode())
    waiting = AckWait(producer, "pzq-produce", dsn, args.timeout, curve)
    failed = 0
    try:
        for number, line in enumerate(args.file, 1):
            body, key = line.rstrip(b"\n"), list[bytes]()
            if args.key_from_line:
                body, key = _keyed(body, number)
            waiting.send([body], headers + key)
            failed += _report_acks(producer.acks())
        failed += _report_acks(waiting.flush())
    except NotKeyed as exc:
        try:  # what went before the line is reported, as if the input ended there
            _report_acks(waiting.flush())
        except TimeoutError as timeout:
            fail("pzq-produce", str(timeout), ExitCode.FAILURE)
        return fail("pzq-produce", str(exc), ExitCode.USAGE)
    except TimeoutError as exc:
        return fail("pzq-produce", str(exc), ExitCode.FAILURE)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    return ExitCode.OK if failed == 0 else ExitCode.FAILURE


class NotKeyed(ValueError):
    """A line without the tab that --key-from-line splits at."""


def _keyed(line: bytes, number: int) -> tuple[bytes, list[bytes]]:
    """The body and KEY header of a ``KEY<tab>body`` line. A line without a tab is
    refused rather than sent without its text or its key."""
    key, tab, body = line.partition(b"\t")
    if not tab:
        raise NotKeyed(f"line {number} has no tab: --key-from-line reads KEY<tab>body; "
                       f"nothing from line {number} on was sent")
    return body, [KEY_HEADER + key]


def _report_acks(acks: list[wire.ProducerAck]) -> int:
    """Print one line per ACK; returns how many were failures."""
    for ack in acks:
        status = "ok" if ack.ok else "failed"
        detail = f" {ack.status_message.decode(errors='replace')}" if ack.status_message else ""
        print(f"{ack.msg_id.decode(errors='replace')} {status}{detail}", flush=True)
    return sum(not ack.ok for ack in acks)
