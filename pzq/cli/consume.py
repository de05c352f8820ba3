"""``pzq-consume``: print delivered messages and ACK them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pzq.cli.common import (
    curve_from,
    endpoint,
    fail,
    name_of,
    positive_seconds,
    start_position,
    tool_parser,
    whole_number,
)
from pzq.cli.consumer_endpoints import ConsumerEndpoints
from pzq.cli.line_output import LineOutput, output_for
from pzq.cli.waiting import DeliveryWait, Notice, say_waiting, tell_links
from pzq.client import Consumer, GroupConsumer, RoutedGroupConsumer, RouteTable
from pzq.client.consumer import Message
from pzq.errors import ConsumeRefused, ConsumeUnanswered, ExitCode
from pzq.protocol import consume as consume_wire
from pzq.tool_base import quiet_on_closed_pipe, sigterm_as_interrupt

DEFAULT_SEND = "tcp://127.0.0.1:11132"
DEFAULT_CONSUME = "tcp://127.0.0.1:11135"
# Deliveries a consumer of --send-dsn takes off its socket to give back when its reader
# has gone (its prefetch, and some): the node sends more as NACKs come, also those NACKed.
GIVE_BACK_MOST = 1000
NO_ANSWER = "no answer yet"  # to a group's CONSUME


def make_argument_parser() -> argparse.ArgumentParser:
    parser = tool_parser("pzq-consume", "Print delivered messages and ACK them.")
    parser.add_argument("--dsn", type=endpoint, action="append",
                        help=f"a node's --send-dsn, repeatable (default: {DEFAULT_SEND}); "
                             f"with --group its --consume-dsn (default: {DEFAULT_CONSUME})")
    parser.add_argument("--count", type=whole_number(0), default=0, metavar="N",
                        help="stop after N messages; 0 for no limit")
    parser.add_argument("--no-ack", action="store_true", help="print without ACKing")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="SECONDS",
                        help="fail (exit 1) when nothing is delivered within this many seconds "
                             "(default: wait forever)")
    parser.add_argument("--idle-timeout", type=positive_seconds, default=None,
                        metavar="SECONDS",
                        help="stop (exit 0) when nothing arrives for this many seconds")
    _group_arguments(parser)
    return parser


@quiet_on_closed_pipe
@sigterm_as_interrupt
def consume_main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    if (args.topic is None) != (args.group is None):
        parser.error("--topic and --group go together (without them: the original queue)")
    if args.group is None and (args.filter or args.start or args.window or args.routes):
        parser.error("--filter, --start, --window and --routes need --topic and --group")
    if args.routes and args.dsn:
        parser.error("--routes finds the nodes itself: give it instead of --dsn")
    dsns = args.routes or args.dsn or [DEFAULT_SEND if args.group is None
                                       else DEFAULT_CONSUME]
    endpoints = ConsumerEndpoints(curve_from(parser, args), group=args.group is not None)
    tell_links(parser.prog)
    try:
        return _consume(parser.prog, args, dsns, endpoints)
    finally:
        endpoints.close()


def _consume(prog: str, args: argparse.Namespace, dsns: list[str],
             endpoints: ConsumerEndpoints) -> int:
    try:
        consumer = _consumer(args, dsns, endpoints)
    except (ConsumeRefused, ValueError) as exc:  # ValueError: no node to read (--routes)
        return fail(prog, str(exc), ExitCode.FAILURE)
    except ConsumeUnanswered as exc:  # said with this tool's closer look at each endpoint
        return fail(prog, str(ConsumeUnanswered(exc.waited, endpoints.states(dsns, NO_ANSWER))),
                    ExitCode.FAILURE)
    except TimeoutError as exc:  # the route table's: it says why
        return fail(prog, str(exc), ExitCode.FAILURE)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    if isinstance(consumer, RoutedGroupConsumer):  # waits on the nodes, not the monitors
        dsns = consumer.table.every("consume")
    output = output_for(sys.stdout)
    with consumer:
        waiting = DeliveryWait(consumer, "pzq-consume", dsns, output,
                               lambda dsn: endpoints.state(dsn, "nothing to deliver yet"))
        try:
            received = _print_messages(waiting, output, args)
        except (TimeoutError, ConsumeRefused) as exc:  # ConsumeRefused: the group removed
            return fail(prog, str(exc), ExitCode.FAILURE)
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED
    if received == 0 and not waiting.anyone_answers():
        return fail(prog, waiting.nothing_answers(), ExitCode.FAILURE)
    return ExitCode.OK


def _group_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", type=name_of("topic"),
                        help="consume this topic as a consumer group (--group)")
    parser.add_argument("--group", type=name_of("group"),
                        help="the consumer group, made on first use")
    parser.add_argument("--filter", default="", metavar="TAG",
                        help="a new group's filter: a TAG, or a prefix ending in '*'")
    parser.add_argument("--start", type=start_position, default=None, metavar="WHERE",
                        help="where a new group starts: earliest (default), latest, or a "
                             "time (ISO 8601, or µs since the epoch)")
    parser.add_argument("--window", type=whole_number(1, consume_wire.MAX_WINDOW), default=None,
                        metavar="N", help="most unacked deliveries to this consumer, 1 to "
                                          f"{consume_wire.MAX_WINDOW} (default: 100)")
    parser.add_argument("--routes", type=endpoint, action="append", metavar="MONITOR",
                        help="a node's --monitor-dsn (repeatable): read the group on every "
                             "node of the cluster, learned from the route table")


def _consumer(args: argparse.Namespace, dsns: list[str],
              endpoints: ConsumerEndpoints) -> Consumer | GroupConsumer | RoutedGroupConsumer:
    curve, context = endpoints.curve, endpoints.watch.context
    if args.group is None:
        return Consumer(dsns, curve=curve, context=context)
    start = args.start or "earliest"
    if args.routes:
        table = RouteTable(dsns, curve, notice=say_waiting("pzq-consume"))
        return RoutedGroupConsumer(table, args.topic, args.group, window=args.window or 100,
                                   context=context, curve=curve, filter=args.filter,
                                   start=int(start) if start.isdigit() else start)
    # Like the deliveries after it, the node's answer is awaited as --timeout or
    # --idle-timeout say, for ever without them, and the wait says why after a second.
    notice = Notice("pzq-consume")
    return GroupConsumer(dsns, args.topic, args.group, window=args.window or 100,
                         filter=args.filter, start=int(start) if start.isdigit() else start,
                         context=context, curve=curve, timeout=args.timeout or args.idle_timeout,
                         notice=lambda: notice.once(lambda: (
                             f"waiting for the node to take group {args.group} of topic "
                             f"{args.topic}: {endpoints.states(dsns, NO_ANSWER)}")))


def _print_messages(waiting: DeliveryWait, output: LineOutput, args: argparse.Namespace) -> int:
    received = 0
    unacked: list[Message] = []  # handed on; ACKed together once a batch is handed on
    message = waiting.first(args.timeout, args.idle_timeout)
    try:
        while message is not None:
            body = b" ".join(message.parts).decode(errors="replace")
            count = "" if message.deliveries is None else f" deliveries={message.deliveries}"
            output.hand_on(f"{message.key.decode()}{count} {body}")
            if not args.no_ack:
                unacked.append(message)
                if not _more_at_hand(waiting.consumer):
                    _ack(waiting.consumer, unacked)
            received += 1
            if args.count and received >= args.count:
                break
            message = None  # handed on: nothing to give back if the wait ends the pipe
            message = waiting.next(args.idle_timeout)
    except BrokenPipeError:
        _give_back(waiting.consumer, message)
        raise
    finally:
        _ack(waiting.consumer, unacked)
    return received


def _give_back(consumer: Consumer | GroupConsumer | RoutedGroupConsumer,
               message: Message | None) -> None:
    """The reader has gone: what it did not take goes back, to be delivered again. A
    group's consumer says BYE as it closes, which gives back all it holds at once; a
    consumer of --send-dsn NACKs what it holds (what the node sends it meanwhile, not
    knowing it leaves, comes back at its ack deadline)."""
    if isinstance(consumer, GroupConsumer | GroupConsumer | RoutedGroupConsumer):
        return
    held = [] if message is None else [message]
    while len(held) < GIVE_BACK_MOST and (arrived := consumer.receive(0)) is not None:
        held.append(arrived)
    for message in held:
        message.nack()


def _more_at_hand(consumer: Consumer | GroupConsumer | RoutedGroupConsumer) -> bool:
    """Whether the consumer holds more of a batch it received, to print first."""
    return isinstance(consumer, GroupConsumer) and consumer.arrived > 0


def _ack(consumer: Consumer | GroupConsumer | RoutedGroupConsumer,
         messages: list[Message]) -> None:
    """ACK what was printed (a group's consumer in one ACK) and forget it."""
    if isinstance(consumer, GroupConsumer | RoutedGroupConsumer):
        consumer.ack_many(messages)
    else:
        for message in messages:
            message.ack()
    messages.clear()
