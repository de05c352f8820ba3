"""One request on a node's monitor socket, awaited: the asyncio form of
pzq.client.monitor, with its answers and errors."""

from __future__ import annotations

import time

import zmq

from pzq import reach
from pzq.aio import probe
from pzq.aio.socket_io import AsyncContext, AsyncSocket, open_socket, wait_events
from pzq.client.monitor import StatsAnswer, monitor_reply, stats_answer
from pzq.errors import EndpointError
from pzq.protocol.monitor_text import parse_monitor_text
from pzq.security import ClientSecurity
from pzq.zmqio import POLLIN, POLLOUT, recv_frames, send_frames


async def request_monitor(dsn: str, command: str, timeout: float = 5.0,
                          curve: ClientSecurity | None = None,
                          context: AsyncContext | None = None) -> bytes:
    """The node's answer to ``command``. EndpointError for an endpoint that cannot be
    connected to (a host that does not resolve, too) or does not speak the monitor
    protocol; TimeoutError, with the likely reason, when nothing answers within
    ``timeout`` seconds. A request of its own socket: cancelled, nothing is left."""
    try:
        socket = open_socket(context, zmq.DEALER, dsn, curve, {zmq.LINGER: 0})
    except zmq.ZMQError as exc:
        raise EndpointError(f"cannot connect to {dsn}: {zmq.strerror(exc.errno or 0)}") \
            from None
    try:
        if reach.tcp_address(dsn) is not None:
            unresolved = await probe.unresolvable(dsn)
            if unresolved:  # no wait would mend it: say so at once
                raise EndpointError(f"cannot connect to {dsn}: {unresolved}")
        frames = await _exchange(socket, command, time.monotonic() + timeout)
    finally:
        socket.close()
    if frames is None:
        reason = await probe.why_silent(dsn, curve, min(timeout, probe.PROBE_TIMEOUT_S))
        raise TimeoutError(f"no answer from {dsn} within {timeout:g} s: {reason}")
    return monitor_reply(dsn, frames)


async def _exchange(socket: AsyncSocket, command: str,
                    deadline: float) -> list[bytes] | None:
    """The answer to ``command`` by ``deadline``; None when it did not come. The send
    waits for the socket to take it (a refused CURVE handshake leaves none to)."""
    for events in (POLLOUT, POLLIN):
        left = deadline - time.monotonic()
        if left <= 0 or not await wait_events(socket, events, left, "monitor request"):
            return None
        if events == POLLOUT:
            send_frames(socket, [b"", command.encode()])
    return recv_frames(socket)


async def monitor_figures(dsn: str, timeout: float = 5.0,
                          curve: ClientSecurity | None = None) -> dict[str, str]:
    """The node's ``MONITOR`` answer, its ``key: value`` lines as a dict of texts
    (``messages``, ``messages_inflight``, ...); raises as ``request_monitor`` does."""
    return parse_monitor_text(await request_monitor(dsn, "MONITOR", timeout, curve))


async def fetch_stats(dsn: str, timeout: float = 5.0, curve: ClientSecurity | None = None,
                      context: AsyncContext | None = None) -> StatsAnswer:
    """The node's STATS, or why there are none (``StatsAnswer.error``)."""
    try:
        reply = await request_monitor(dsn, "STATS", timeout, curve, context)
    except (TimeoutError, EndpointError) as exc:
        return StatsAnswer(dsn, None, str(exc))
    return stats_answer(dsn, reply)
