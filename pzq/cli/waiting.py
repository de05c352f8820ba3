"""Waiting on a node in the command-line tools: say once what is awaited, and why it may not come.

A tool that waits in silence looks hung. After a second without progress, each
wait says on stderr, once, what it is waiting for and what a plain socket probe
tells about the endpoint (nothing there, connected, maybe refused by CURVE).
"""

from __future__ import annotations

import errno
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from pzq import curve_probe, reach
from pzq.cli.human import messages
from pzq.cli.line_output import LineOutput
from pzq.client import (
    Consumer,
    GroupConsumer,
    Message,
    Producer,
    ProducerAck,
    RoutedGroupConsumer,
    RoutedProducer,
)
from pzq.client.common import NOTICE_AFTER_S
from pzq.client.link_watch import links_log
from pzq.security import ClientSecurity, plain_if_none

T = TypeVar("T")
OUTPUT_WATCH_S = 0.1  # how soon a consumer waiting for deliveries sees its reader gone


class _ToolLine(logging.Formatter):
    """A consumer's log line as the tool's own: its name first, as its other lines."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prog}: {record.getMessage().removeprefix('pzq consumer: ')}"


def tell_links(prog: str) -> None:
    """The consumers' words on a node away and back (pzq.client.link_watch), on stderr
    as this tool's lines: a node killed while the tool waited was said by no line."""
    for earlier in [each for each in links_log.handlers
                    if isinstance(each.formatter, _ToolLine)]:  # (main called again)
        links_log.removeHandler(earlier)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ToolLine(prog))
    links_log.addHandler(handler)
    links_log.setLevel(logging.INFO)
    links_log.propagate = False


class Notice:
    """One line on stderr, said at most once."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.said = False

    def once(self, text: Callable[[], str]) -> None:
        if not self.said:
            print(f"{self.prog}: {text()}", file=sys.stderr, flush=True)
            self.said = True


def say_waiting(prog: str) -> Callable[[str], None]:
    """A notice callback (request_monitor's, a RouteTable's) that says its line on
    stderr as ``prog``."""
    return lambda text: print(f"{prog}: {text}", file=sys.stderr, flush=True)


class AckWait:
    """A producer's sends and flush, each given ``timeout`` seconds, that say why ACKs are
    late; ``ack_timeout``: the producer gives a message up this long after it went
    (None: never, a routed producer sends it again), so no wait lasts longer."""

    def __init__(self, producer: Producer | RoutedProducer, prog: str, dsn: str, timeout: float,
                 curve: ClientSecurity, ack_timeout: float | None = None) -> None:
        self.producer = producer
        self.dsn = dsn
        self.timeout = timeout
        self.ack_timeout = ack_timeout
        self.curve = curve
        self.notice = Notice(prog)
        self._unanswered_since: float | None = None  # messages out, no ACK since then

    def acks(self, timeout: float) -> list[ProducerAck]:
        """ACKs that came within ``timeout`` s, between reads of the input: when none has
        come for NOTICE_AFTER_S while messages are out, it says so, once."""
        arrived = self.producer.acks(timeout)
        now = time.monotonic()
        if arrived or not self.producer.outstanding:
            self._unanswered_since = None
        elif self._unanswered_since is None:
            self._unanswered_since = now
        elif now - self._unanswered_since >= NOTICE_AFTER_S:
            self.notice.once(lambda: self._no_ack("yet"))
        return arrived

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes]) -> bytes:
        return self._wait(lambda step: self.producer.send(parts, headers, timeout=step))

    def flush(self) -> list[ProducerAck]:
        return self._wait(self.producer.flush)

    def _wait(self, attempt: Callable[[float], T]) -> T:
        deadline = time.monotonic() + self.timeout
        while True:
            waiting_for = self.producer.outstanding
            try:
                return attempt(max(0.0, min(NOTICE_AFTER_S, deadline - time.monotonic())))
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(self._no_ack(f"within {self.timeout:g} s")) from None
                if self.producer.outstanding >= waiting_for:  # not one ACK in that stretch
                    self.notice.once(lambda: f"{self._no_ack('yet')}; "
                                             f"{self._waiting_up_to()}")

    def _waiting_up_to(self) -> str:
        """How long the wait lasts at most: ``timeout``, or the ack timeout when that is
        shorter (what is out by then is given up, NO_ACK: nothing is left to wait for)."""
        if self.ack_timeout is not None and self.ack_timeout < self.timeout:
            return f"waiting up to {self.ack_timeout:g} s (--ack-timeout)"
        return f"waiting up to {self.timeout:g} s"

    def _no_ack(self, when: str) -> str:
        """What has no ACK ``when`` ("yet", "within 30 s"), where it waits and what a
        probe finds there: the node's endpoint, or for a routing producer the owners
        the messages went to (the monitors it asked for the table are not where)."""
        count = messages(self.producer.outstanding)
        if isinstance(self.producer, RoutedProducer):
            owners = "; ".join(f"{endpoint} ({messages(waiting)}): {self._why(endpoint)}"
                               for endpoint, waiting in self.producer.unanswered_at.items())
            return f"no ACK {when} for {count} from their partitions' owners: {owners}"
        if when == "yet":
            return f"no ACK yet from {self.dsn} for {count}: {self._why(self.dsn)}"
        return f"no ACK from {self.dsn} {when} for {count}: {self._why(self.dsn)}"

    def _why(self, dsn: str) -> str:
        return curve_probe.why_silent(dsn, self.curve)


class DeliveryWait:
    """A consumer's wait for deliveries that says, once, what it waits for."""

    def __init__(self, consumer: Consumer | GroupConsumer | RoutedGroupConsumer, prog: str,
                 dsns: Sequence[str], output: LineOutput, state: Callable[[str], str]) -> None:
        """``state``: what is found at an endpoint, as the wait says it."""
        self.consumer = consumer
        self.dsns = list(dsns)
        self.output = output
        self.state = state
        self.notice = Notice(prog)

    def first(self, timeout: float | None, idle_timeout: float | None) -> Message | None:
        """The first delivery; TimeoutError after ``timeout``, None after ``idle_timeout``."""
        limit = timeout if timeout is not None else idle_timeout
        deadline = None if limit is None else time.monotonic() + limit
        message = self._receive(NOTICE_AFTER_S if limit is None
                                else min(NOTICE_AFTER_S, limit))
        if message is not None:
            return message
        self.notice.once(lambda: "waiting for deliveries from " + "; ".join(
            self.state(dsn) for dsn in self.dsns))
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        message = self._receive(remaining)
        if message is None and timeout is not None:
            raise TimeoutError(f"nothing delivered within {timeout:g} s from "
                               + "; ".join(self.state(dsn) for dsn in self.dsns))
        return message

    def next(self, idle_timeout: float | None) -> Message | None:
        return self._receive(idle_timeout)

    def _receive(self, timeout: float | None) -> Message | None:
        """The next delivery within ``timeout`` s (None: for ever); BrokenPipeError
        once the output's reader has gone meanwhile: nothing could be handed on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            message = self.consumer.receive(OUTPUT_WATCH_S if left is None
                                            else min(left, OUTPUT_WATCH_S))
            if message is not None:
                return message
            if self.output.closed():
                raise BrokenPipeError(errno.EPIPE, "the output's reader has gone")
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def anyone_answers(self) -> bool:
        return any(reach.accepts_connections(dsn) is not False for dsn in self.dsns)

    def nothing_answers(self) -> str:
        return f"nothing answers at {', '.join(self.dsns)} (is the node running?)"


def endpoint_state(dsn: str, curve: ClientSecurity | None, awaited: str,
                   awaited_with_curve: str) -> str:
    """What a plain probe finds at ``dsn``, for a tool that waits on it, and for a CURVE
    client what the node says to its handshake: ``awaited`` names what has not come
    yet (``awaited_with_curve`` when CURVE may be the cause and the probe cannot tell)."""
    curve = plain_if_none(curve)
    if curve.on:  # the handshake first: a CURVE node logs a plain connection as refused
        answered, refusal = curve_probe.handshake_verdict(dsn, curve, reach.PROBE_TIMEOUT_S)
        if refusal:
            return f"{dsn}: connected, but {refusal}"
        if answered:
            return f"{dsn}: connected, {awaited_with_curve}"
    answers = reach.accepts_connections(dsn)
    if answers is False:
        return f"{dsn}: nothing answers there yet (is the node running?)"
    if answers is None:
        return f"{dsn}: {reach.unresolvable(dsn) or 'connecting'}"
    return f"{dsn}: connected, {awaited_with_curve if curve.on else awaited}"
