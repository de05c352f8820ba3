"""``pzq-produce``: send each input line as one message and print its ACK."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pzq.cli.common import (
    curve_from,
    endpoint,
    fail,
    moment_us,
    positive_seconds,
    seconds_of_duration,
    tool_parser,
)
from pzq.cli.handshake_watch import HandshakeWatch
from pzq.cli.human import messages
from pzq.cli.input_lines import InputLines
from pzq.cli.waiting import AckWait, say_waiting
from pzq.client import Producer, RoutedProducer, RouteTable
from pzq.client.producer import time_headers, topic_headers
from pzq.client.sessions.producer import ACK_TIMEOUT_S
from pzq.errors import ExitCode
from pzq.protocol.frames import HEADER_PATTERN, ProducerAck
from pzq.protocol.headers import KEY_HEADER
from pzq.security import ClientSecurity
from pzq.tool_base import quiet_on_closed_pipe, sigterm_as_interrupt

DEFAULT_RECEIVE = "tcp://127.0.0.1:11131"
ACK_WAIT_S = 0.02  # while waiting for input with ACKs due: how often a line is looked for


def make_argument_parser() -> argparse.ArgumentParser:
    parser = tool_parser("pzq-produce", "Send each input line as one message; report the ACKs.")
    parser.add_argument("--dsn", type=endpoint,
                        help=f"the node's --receive-dsn (default: {DEFAULT_RECEIVE})")
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
    _add_time_options(parser)
    parser.add_argument("--routes", type=endpoint, action="append", metavar="MONITOR",
                        help="a node's --monitor-dsn (repeatable): send each message to "
                             "the owner of its partition, learned from the route table "
                             "(needs --topic)")
    parser.add_argument("--timeout", type=positive_seconds, default=30.0, metavar="SECONDS",
                        help="seconds to wait for ACKs")
    parser.add_argument("--ack-timeout", type=positive_seconds, metavar="SECONDS",
                        help=f"seconds after which a message sent without its ACK is given "
                             f"up: reported NO_ACK, the node may have stored it or not "
                             f"(default: {ACK_TIMEOUT_S:g}; not with --routes, which sends "
                             f"such a message again)")
    parser.add_argument("file", nargs="?", type=argparse.FileType("rb"), default=sys.stdin.buffer,
                        help="lines to send (default: standard input)")
    return parser


@quiet_on_closed_pipe
@sigterm_as_interrupt
def produce_main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error("--window must be at least 1")
    for header in args.header:
        if not HEADER_PATTERN.match(header.encode()):
            parser.error(f"--header {header} is not NAME:value, e.g. TOPIC:orders")
    _check_routes(parser, args)
    args.ack_timeout = args.ack_timeout or ACK_TIMEOUT_S
    args.dsn = args.dsn or DEFAULT_RECEIVE
    if args.key is not None and args.key_from_line:
        parser.error("--key and --key-from-line go alone: one key for all, or one a line")
    args.time_headers = _time_headers(parser, args)
    curve = curve_from(parser, args)
    if args.routes:
        try:
            table = RouteTable(args.routes, curve, notice=say_waiting("pzq-produce"))
            routed = RoutedProducer(table, args.topic, window=args.window, curve=curve)
        except TimeoutError as exc:
            return fail("pzq-produce", str(exc), ExitCode.FAILURE)
        except KeyboardInterrupt:  # while the route table is asked for
            return ExitCode.INTERRUPTED
        with routed:
            return _produce_lines(routed, args, ", ".join(args.routes), curve)
    watch = HandshakeWatch()  # a message given up without any handshake taken: never sent
    try:
        with Producer(args.dsn, window=args.window, curve=curve, context=watch.context,
                      ack_timeout=args.ack_timeout) as producer:
            return _produce_lines(producer, args, args.dsn, curve, watch.ever_taken)
    finally:
        watch.close()


def _check_routes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.routes and not args.topic:
        parser.error("--routes needs --topic (the partitioned topic)")
    if args.routes and args.dsn:
        parser.error("--routes finds the nodes itself: give it instead of --dsn")
    if args.routes and args.ack_timeout is not None:
        parser.error("--ack-timeout goes with --dsn: --routes sends a message without its "
                     "ACK again")


def _add_time_options(parser: argparse.ArgumentParser) -> None:
    times = parser.add_argument_group("time and order of every message")
    times.add_argument("--delay", type=seconds_of_duration, metavar="DURATION",
                       help="deliver no sooner than this after the node stores it, "
                            "e.g. 30s, 10m, 2d (a DELAY header)")
    times.add_argument("--not-before", type=moment_us, metavar="TIME",
                       help="deliver no sooner than this time: ISO 8601 such as "
                            "2026-12-01T09:00:00Z, or µs since the epoch (a NOT-BEFORE "
                            "header)")
    times.add_argument("--ttl", type=seconds_of_duration, metavar="DURATION",
                       help="never deliver once this long has passed since the node "
                            "stored it, e.g. 10m (a TTL header)")
    times.add_argument("--expires", type=moment_us, metavar="TIME",
                       help="never deliver from this time on, as --not-before takes "
                            "it (an EXPIRES header)")
    times.add_argument("--priority", type=int, choices=range(10), metavar="0-9",
                       help="9 first, on a topic declared with priorities=on (a "
                            "PRIORITY header)")


def _time_headers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[bytes]:
    """The time options' header frames, the same for every message."""
    if args.delay is not None and args.not_before is not None:
        parser.error("--delay and --not-before go alone: one time to deliver from")
    if args.ttl is not None and args.expires is not None:
        parser.error("--ttl and --expires go alone: one time to expire at")
    try:
        return time_headers(args.delay, args.not_before, args.ttl, args.expires,
                            args.priority)
    except ValueError as exc:  # the option is named as the Python argument is
        option = str(exc).split()[0]
        parser.error(f"--{option.replace('_', '-')}{str(exc)[len(option):]}")


def _produce_lines(producer: Producer | RoutedProducer, args: argparse.Namespace, dsn: str,
                   curve: ClientSecurity, reached: Callable[[], bool] = lambda: True) -> int:
    """``reached``: whether a handshake with the node was ever taken (False: nothing
    sent reached it)."""
    headers = [header.encode() for header in args.header]
    headers += topic_headers(None if args.routes else args.topic, args.tag)
    if args.key is not None:
        headers.append(KEY_HEADER + args.key.encode())
    headers += args.time_headers
    waiting = AckWait(producer, "pzq-produce", dsn, args.timeout, curve,
                      None if args.routes else args.ack_timeout)
    lines = InputLines(args.file)
    tally = AckTally(reached)
    try:
        while not lines.ended:
            _acks_until_input(waiting, lines, tally)
            first = lines.count + 1
            for number, line in enumerate(lines.read(), first):
                body, key = line, list[bytes]()
                if args.key_from_line:
                    body, key = _keyed(body, number)
                waiting.send([body], headers + key)
            # once per read, not per line: the producer's batches fill meanwhile
            _report_acks(producer.acks(), tally)
        _report_acks(waiting.flush(), tally)
    except NotKeyed as exc:
        try:  # what went before the line is reported, as if the input ended there
            _report_acks(waiting.flush(), tally)
        except TimeoutError as timeout:
            _report_acks(producer.acks(), tally)
            fail("pzq-produce", str(timeout), ExitCode.FAILURE)
        _say_given_up(tally, args.ack_timeout)
        return fail("pzq-produce", str(exc), ExitCode.USAGE)
    except TimeoutError as exc:
        _report_acks(producer.acks(), tally)  # those that came in time are shown still
        _say_given_up(tally, args.ack_timeout)
        return fail("pzq-produce", str(exc), ExitCode.FAILURE)
    except KeyboardInterrupt:
        return _interrupted(producer, tally, args.ack_timeout)
    _say_given_up(tally, args.ack_timeout)
    return ExitCode.OK if tally.failed == 0 else ExitCode.FAILURE


@dataclass
class AckTally:
    reached: Callable[[], bool]  # a handshake with the node was taken (else none sent)
    failed: int = 0  # ACKs not ok, the given up among them
    given_up: int = 0  # no ACK within --ack-timeout (NO_ACK, made by the producer)


NEVER_SENT = ("never reached the node (no handshake with it was taken: a node down, or "
              "one that refuses this client's keys), so nothing was stored; send {them} "
              "again")


def _say_given_up(tally: AckTally, ack_timeout: float) -> None:
    """Messages given up are neither stored for sure nor refused (unless no handshake
    was ever taken): said in words, once."""
    if tally.given_up:
        them = "it" if tally.given_up == 1 else "them"
        fate = (f"the node may have stored {them} or not; send {them} again with the same "
                f"DEDUP-ID header to have {them} stored once" if tally.reached()
                else NEVER_SENT.format(them=them))
        print(f"pzq-produce: {messages(tally.given_up)} without ACK within "
              f"{ack_timeout:g} s (NO_ACK): {fate}", file=sys.stderr, flush=True)


def _acks_until_input(waiting: AckWait, lines: InputLines, tally: AckTally) -> None:
    """While no input is there (a person typing, a slow writer), show each ACK as it
    comes."""
    while waiting.producer.outstanding and not lines.ready(0):
        _report_acks(waiting.acks(ACK_WAIT_S), tally)


def _interrupted(producer: Producer | RoutedProducer, tally: AckTally,
                 ack_timeout: float) -> int:
    """Ctrl-C: show what the node ACKed before it, and say what has no ACK yet."""
    _report_acks(producer.acks(), tally)
    _say_given_up(tally, ack_timeout)
    if producer.outstanding:
        them = "it" if producer.outstanding == 1 else "them"
        fate = (f"the node may have stored {them}" if tally.reached()
                else NEVER_SENT.format(them=them))
        print(f"pzq-produce: interrupted with {messages(producer.outstanding)} sent and "
              f"not ACKed yet: {fate}", file=sys.stderr, flush=True)
    return ExitCode.INTERRUPTED


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


def _report_acks(acks: list[ProducerAck], tally: AckTally) -> None:
    """Print one line per ACK, in one write; the failures and those given up counted."""
    if not acks:
        return
    sys.stdout.write("".join(
        f"{ack.msg_id.decode(errors='replace')} {'ok' if ack.ok else 'failed'}"
        f"{' ' + ack.status_message.decode(errors='replace') if ack.status_message else ''}\n"
        for ack in acks))
    sys.stdout.flush()
    tally.failed += sum(not ack.ok for ack in acks)
    tally.given_up += sum(ack.given_up for ack in acks)
