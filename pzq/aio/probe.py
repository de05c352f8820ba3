"""Why an endpoint does not answer, told without blocking the loop: the asyncio form
of pzq.reach and pzq.curve_probe, whose words it says (``reach.silence``,
``curve_probe.refusal``).

A plain connection tells whether a process accepts connections there; for a CURVE
client, a socket that only shakes hands tells, by its monitor, whether the node
refused the client's key, could not read its handshake, or serves no CURVE.
"""

from __future__ import annotations

import asyncio
import socket as sockets
from collections.abc import Sequence

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from pzq import curve_probe, endpoint_probe, reach
from pzq.client import router_probe
from pzq.security import ClientSecurity, plain_if_none
from pzq.sockets import dual_stack
from pzq.zmqio import recv_frames

PROBE_TIMEOUT_S = reach.PROBE_TIMEOUT_S


async def why_silent(dsn: str | Sequence[str], curve: ClientSecurity | None,
                     timeout: float = PROBE_TIMEOUT_S) -> str:
    """The likely reason ``dsn`` does not answer, in words to act on (several
    endpoints: each one's, named)."""
    if isinstance(dsn, str):
        return await _why_silent(dsn, curve, timeout)
    reasons = await asyncio.gather(*(_why_silent(each, curve, timeout) for each in dsn))
    return reach.each_named(dsn, reasons)


async def _why_silent(dsn: str, curve: ClientSecurity | None, timeout: float) -> str:
    curve = plain_if_none(curve)
    if curve.on:  # curve_probe.why_silent's order: no plain connection a node would log
        ended = await _handshake(dsn, curve, timeout)
        if curve_probe.answered(ended):
            plain = await _handshake(dsn, None, timeout) if curve_probe.hung_up(ended) \
                else None
            return curve_probe.told(ended, plain)
    answers = await accepts_connections(dsn, timeout)
    if answers and not curve.on:
        refused = curve_probe.plain_refusal(await asyncio.to_thread(
            endpoint_probe.mechanism, dsn, timeout))
        if refused is not None:
            return refused
    unresolved = await unresolvable(dsn) if answers is None else None
    return reach.silence(answers, unresolved, curve.on)


async def accepts_connections(dsn: str, timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """True: a process accepts connections at ``dsn``; False: none does; None: cannot
    tell (another transport, an unresolvable host, no answer in time)."""
    path = reach.ipc_path(dsn)
    address = reach.tcp_address(dsn)
    if path is not None:
        target = "\0" + path[1:] if path.startswith("@") else path
        opening = asyncio.open_unix_connection(target)
    elif address is not None:
        opening = asyncio.open_connection(*address)
    else:
        return None
    try:
        async with asyncio.timeout(timeout):
            _, writer = await opening
    except (FileNotFoundError, ConnectionRefusedError):
        return False
    except (OSError, TimeoutError):
        return None
    writer.close()
    return True


async def unresolvable(dsn: str) -> str | None:
    """Why the host of a ``tcp://`` endpoint has no address (None: it has, or not tcp)."""
    address = reach.tcp_address(dsn)
    if address is None:
        return None
    try:
        await asyncio.get_running_loop().getaddrinfo(*address, type=sockets.SOCK_STREAM)
    except sockets.gaierror as exc:
        return f"host {address[0]} does not resolve ({exc.strerror})"
    except OSError:
        return None
    return None


async def is_router(dsn: str, curve: ClientSecurity | None,
                    timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """Whether a ROUTER answers at ``dsn``: pzq.client.router_probe.is_router, without
    blocking the loop."""
    for _ in range(router_probe.ATTEMPTS):
        ended = await _handshake(dsn, curve, timeout, zmq.REQ, router_probe.HANDSHAKE_ENDED)
        event = None if ended is None else ended[0]
        if not router_probe.ask_again(event):
            break
    return router_probe.kind_told(event)


async def _handshake(dsn: str, curve: ClientSecurity | None, timeout: float,
                     kind: int = zmq.DEALER,
                     events: int = curve_probe.EVENTS) -> curve_probe.Ended:
    """How a handshake at ``dsn`` of a ``kind`` socket ended (its first of ``events``);
    None when it did not within ``timeout``."""
    socket = zmq.asyncio.Context.instance().socket(kind)
    socket.setsockopt(zmq.LINGER, 0)
    monitor = socket.get_monitor_socket(events)
    try:
        dual_stack(socket, dsn)
        plain_if_none(curve).apply(socket)
        socket.connect(dsn)
        poller = zmq.asyncio.Poller()
        poller.register(monitor, zmq.POLLIN)
        if not await poller.poll(int(timeout * 1000)):
            return None
        event = parse_monitor_message(recv_frames(monitor))
        return int(event["event"]), int(event["value"])
    except zmq.ZMQError:
        return None  # the endpoint itself is wrong: the caller's connect says how
    finally:
        socket.disable_monitor()
        monitor.close()
        socket.close()
