"""``pzq-consume``: print delivered messages and ACK them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pzq.cli.common import (
    curve_from,
    endpoint,
    fail,
    positive_seconds,
    tool_parser,
)
from pzq.cli.waiting import DeliveryWait
from pzq.client import Consumer
from pzq.errors import ExitCode

DEFAULT_SEND = "tcp://127.0.0.1:11132"


def consume_main(argv: Sequence[str] | None = None) -> int:
    parser = tool_parser("pzq-consume", "Print delivered messages and ACK them.")
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
            return fail(parser.prog, str(exc), ExitCode.FAILURE)
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED
    if received == 0 and not waiting.anyone_answers():
        return fail(parser.prog, waiting.nothing_answers(), ExitCode.FAILURE)
    return ExitCode.OK


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
