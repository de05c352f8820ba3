"""Command-line tools over pzq.client: pzq-produce, pzq-consume, pzq-ctl, pzq-keygen.

pzq-monitor lives in pzq.monitor_cli; ``request_monitor`` here serves them all.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import zmq

from pzq import security
from pzq.client import Consumer, Producer
from pzq.errors import ConfigError
from pzq.node import monitor
from pzq.protocol import frames as wire
from pzq.security import ClientCurve

EXIT_OK = 0
EXIT_FAILURE = 1  # some message was refused, or the node did not answer in time
EXIT_USAGE = 2

DEFAULT_RECEIVE = "tcp://127.0.0.1:11131"
DEFAULT_SEND = "tcp://127.0.0.1:11132"
DEFAULT_MONITOR = "ipc:///tmp/pzq-monitor"


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--curve-client-key", metavar="FILE",
                        help="this client's CURVE key pair (a .key_secret file)")
    parser.add_argument("--curve-server-key", metavar="FILE",
                        help="the node's public CURVE key (a .key file)")
    return parser


def _curve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ClientCurve | None:
    try:
        return security.client_curve(args.curve_client_key, args.curve_server_key)
    except ConfigError as exc:
        parser.error(str(exc))


def produce_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser("pzq-produce", "Send each input line as one message; report the ACKs.")
    parser.add_argument("--dsn", default=DEFAULT_RECEIVE, help="the node's --receive-dsn")
    parser.add_argument("--window", type=int, default=100, help="messages sent ahead of ACKs")
    parser.add_argument("--header", action="append", default=[],
                        help="a NAME:value header frame for every message (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for ACKs")
    parser.add_argument("file", nargs="?", type=argparse.FileType("rb"), default=sys.stdin.buffer,
                        help="lines to send (default: standard input)")
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error("--window must be at least 1")
    headers = [header.encode() for header in args.header]
    failed = 0
    with Producer(args.dsn, window=args.window, curve=_curve(parser, args)) as producer:
        try:
            for line in args.file:
                producer.send([line.rstrip(b"\n")], headers, timeout=args.timeout)
                failed += _report_acks(producer.acks())
            failed += _report_acks(producer.flush(args.timeout))
        except TimeoutError as exc:
            print(f"pzq-produce: error: {exc}", file=sys.stderr)
            return EXIT_FAILURE
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
    parser.add_argument("--dsn", action="append", help="a node's --send-dsn (repeatable)")
    parser.add_argument("--count", type=int, default=0, help="stop after N messages (0: no limit)")
    parser.add_argument("--no-ack", action="store_true", help="print without ACKing")
    parser.add_argument("--idle-timeout", type=float, default=None,
                        help="stop when nothing arrives for this many seconds")
    args = parser.parse_args(argv)
    received = 0
    with Consumer(args.dsn or [DEFAULT_SEND], curve=_curve(parser, args)) as consumer:
        for message in consumer.messages(args.idle_timeout):
            body = b" ".join(message.parts).decode(errors="replace")
            count = "" if message.deliveries is None else f" deliveries={message.deliveries}"
            print(f"{message.key.decode()}{count} {body}", flush=True)
            if not args.no_ack:
                message.ack()
            received += 1
            if args.count and received >= args.count:
                break
    return EXIT_OK


def ctl_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser("pzq-ctl", "Administer a node over its monitor socket.")
    parser.add_argument("--dsn", default=DEFAULT_MONITOR, help="the node's --monitor-dsn")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("dead", help="list dead letters")
    listing.add_argument("--limit", type=int, default=100)
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
        reply = request_monitor(args.dsn, request, args.timeout, _curve(parser, args))
    except TimeoutError as exc:
        print(f"pzq-ctl: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    text = reply.decode(errors="replace").rstrip("\n")
    if reply.startswith(b"ERROR"):
        print(f"pzq-ctl: {text}", file=sys.stderr)
        return EXIT_FAILURE
    print(text)
    return EXIT_OK


def keygen_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pzq-keygen",
                                     description="Make a CURVE key pair for a node or a client.")
    parser.add_argument("directory", help="where to write NAME.key and NAME.key_secret")
    parser.add_argument("name", help="the pair's name, e.g. node or producer-1")
    args = parser.parse_args(argv)
    public, secret = security.generate(args.directory, args.name)
    print(f"public key (authorize it, give it to clients): {public}")
    print(f"secret key (keep it private): {secret}")
    return EXIT_OK


def request_monitor(dsn: str, command: str, timeout: float = 5.0,
                    curve: ClientCurve | None = None) -> bytes:
    """One request on a node's monitor socket; TimeoutError if it does not answer."""
    context = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.IPV6, 1)
    if curve is not None:
        curve.apply(socket)
    try:
        socket.connect(dsn)
        socket.send_multipart([b"", command.encode()])
        if not socket.poll(int(timeout * 1000), zmq.POLLIN):
            raise TimeoutError(f"no answer from {dsn} within {timeout} s")
        return socket.recv_multipart()[-1]
    finally:
        socket.close()


def monitor_figures(dsn: str, timeout: float = 5.0,
                    curve: ClientCurve | None = None) -> dict[str, str]:
    return monitor.parse_monitor_text(request_monitor(dsn, "MONITOR", timeout, curve))
