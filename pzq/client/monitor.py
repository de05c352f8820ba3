"""One request on a node's monitor socket, for the tools, the exporter and tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from pzq import curve_probe, reach
from pzq.client.common import NOTICE_AFTER_S, remaining_ms, send_before
from pzq.errors import EndpointError
from pzq.protocol.frames import monitor_request_refusal
from pzq.protocol.monitor_text import parse_monitor_text
from pzq.security import ClientSecurity, plain_if_none
from pzq.sockets import dual_stack


def request_monitor(dsn: str, command: str, timeout: float = 5.0,
                    curve: ClientSecurity | None = None,
                    notice: Callable[[str], None] | None = None,
                    context: zmq.Context[zmq.Socket[bytes]] | None = None) -> bytes:
    """The node's answer to ``command``.

    Raises EndpointError for an endpoint that cannot be connected to (its host does
    not resolve, too) or does not speak the monitor protocol, and TimeoutError, with
    the likely reason, when nothing answers within ``timeout`` seconds. After
    NOTICE_AFTER_S without an answer, ``notice`` (when given) is told, once, what is
    awaited and why it may not come. A ``context`` of the caller's lets it end the
    wait at once: terminated, it raises zmq.ContextTerminated here.
    """
    refused = monitor_request_refusal(command.encode())
    if refused is not None:  # the node's answer, without sending what it may not read
        return f"ERROR: {refused}".encode()
    curve = plain_if_none(curve)
    socket: zmq.Socket[bytes] = (context or zmq.Context.instance()).socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    dual_stack(socket, dsn)
    curve.apply(socket)
    try:
        try:
            socket.connect(dsn)
        except zmq.ZMQError as exc:
            reason = zmq.strerror(exc.errno or 0)
            raise EndpointError(f"cannot connect to {dsn}: {reason}") from None
        unresolved = reach.unresolvable(dsn)
        if unresolved:  # no wait would mend it: say so at once
            raise EndpointError(f"cannot connect to {dsn}: {unresolved}")
        frames = _exchange(socket, dsn, command, timeout, curve, notice)
    finally:
        socket.close()
    if frames is None:  # probed with the socket closed: terminating its context needs no wait
        reason = curve_probe.why_silent(dsn, curve, min(timeout, reach.PROBE_TIMEOUT_S))
        raise TimeoutError(f"no answer from {dsn} within {timeout:g} s: {reason}")
    return monitor_reply(dsn, frames)


def monitor_reply(dsn: str, frames: list[bytes]) -> bytes:
    """The text of a monitor reply as a DEALER receives it (``empty, text``);
    EndpointError, naming what answered, for anything else: another endpoint of the
    node, or no pzq node at all, given as a --dsn by mistake."""
    if len(frames) == 2 and frames[0] == b"" and len(frames[1]) > 1:
        return frames[1]
    raise EndpointError(f"{dsn} does not speak the monitor protocol ({_answered_as(frames)}); "
                        "give the node's --monitor-dsn")


def _answered_as(frames: list[bytes]) -> str:
    if len(frames) == 4 and frames[1] in (b"0", b"1") and frames[2] == b"":
        return "it answered as a node's --receive-dsn does, with a producer's ACK"
    if len(frames) == 2 and frames[0] == b"" and len(frames[1]) == 1:
        return "it answered as a node's --archive-dsn does, with a status byte"
    if frames and frames[0] == b"ERROR":
        return "it answered as a node's --consume-dsn does, with ERROR"
    return f"its answer has {len(frames)} frames, not a monitor reply's empty frame and text"


def _exchange(socket: zmq.Socket[bytes], dsn: str, command: str, timeout: float,
              curve: ClientSecurity,
              notice: Callable[[str], None] | None) -> list[bytes] | None:
    """The answer to ``command``, sent and answered within ``timeout``; None when it
    did not come. On the way, after NOTICE_AFTER_S, ``notice`` is told why it is late.

    The send waits for the socket to take it within the deadline (send_before).
    """
    started = time.monotonic()
    deadline = started + timeout
    tell_at = started + NOTICE_AFTER_S if notice is not None else deadline
    sent = False
    while True:
        wait_until = min(deadline, tell_at)
        if not sent:
            sent = send_before(socket, [b"", command.encode()], wait_until)
        if sent and socket.poll(remaining_ms(wait_until), zmq.POLLIN):
            return socket.recv_multipart()
        now = time.monotonic()
        if now >= deadline:
            return None
        if now >= tell_at and notice is not None:
            notice(f"no answer yet from {dsn}: {curve_probe.why_silent(dsn, curve)}; "
                   f"waiting up to {timeout:g} s")
            tell_at = deadline


def monitor_figures(dsn: str, timeout: float = 5.0,
                    curve: ClientSecurity | None = None) -> dict[str, str]:
    """The node's ``MONITOR`` answer, its ``key: value`` lines as a dict of texts
    (``messages``, ``messages_inflight``, ...); raises as ``request_monitor`` does."""
    return parse_monitor_text(request_monitor(dsn, "MONITOR", timeout, curve))


@dataclass(frozen=True)
class StatsAnswer:
    """A node's STATS, or why there are none: ``stats``, the node's JSON (its fields:
    the STATS reference), or None with ``error`` saying why (no answer within the
    timeout, an endpoint that is no monitor's, a reply that is no JSON)."""

    #: the --monitor-dsn asked
    dsn: str
    #: the node's STATS JSON (its fields: the STATS reference), or None
    stats: dict[str, Any] | None
    #: why there are no stats, one line; None when there are
    error: str | None = None

    @property
    def up(self) -> bool:
        """The node answered: ``stats`` holds its figures."""
        return self.stats is not None

    def __repr__(self) -> str:
        # a log line's worth: the figures are some hundred fields, read from .stats
        told = f"{len(self.stats)} fields" if self.stats is not None else f"error={self.error!r}"
        return f"StatsAnswer(dsn={self.dsn!r}, {told})"


def fetch_stats(dsn: str, timeout: float = 5.0, curve: ClientSecurity | None = None,
                notice: Callable[[str], None] | None = None,
                context: zmq.Context[zmq.Socket[bytes]] | None = None) -> StatsAnswer:
    """The node's STATS, or why there are none (``StatsAnswer.error``): it raises
    nothing for a node that does not answer within ``timeout`` seconds or an endpoint
    that is no monitor's. ``notice``: ``request_monitor``'s."""
    try:
        reply = request_monitor(dsn, "STATS", timeout, curve, notice, context)
    except (TimeoutError, EndpointError) as exc:
        return StatsAnswer(dsn, None, str(exc))
    return stats_answer(dsn, reply)


def stats_answer(dsn: str, reply: bytes) -> StatsAnswer:
    """A STATS reply read: its figures, or why they are none."""
    try:
        return StatsAnswer(dsn, json.loads(reply))
    except ValueError:
        return StatsAnswer(dsn, None, f"{dsn} answered STATS with something that is not JSON "
                                      "(not a pzq monitor endpoint?)")


def taken_over_inflight(taken: dict[str, Any]) -> int:
    """A taken-over origin's deliveries out (STATS ``taken_over``), every group together."""
    groups = [taken["default"], *(figures for topic in taken.get("topics", {}).values()
                                  for figures in topic.values())]
    return sum(int(group.get("inflight", 0)) for group in groups)
