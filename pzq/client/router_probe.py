"""Whether a ROUTER answers at an endpoint: a group's consumer heard nothing to its
CONSUME, and at a node's --send-dsn (a DEALER, which takes a DEALER's connection and
never answers) it would hear nothing until its timeout.

A REQ socket pairs only with ROUTER and REP sockets, which send nothing unasked: its
handshake succeeds at a ROUTER, and a DEALER hangs up on it once the two have said
their kinds. ``kind_told`` and ``ask_again`` read how the handshake ended (shared
with the asyncio probe, pzq.aio.probe.is_router); ``is_router`` shakes hands,
blocking.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq import reach
from pzq.security import ClientSecurity, plain_if_none
from pzq.sockets import dual_stack
from pzq.zmqio import Socket

HANDSHAKE_ENDED = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                   | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                   | zmq.EVENT_DISCONNECTED)


# A DEALER's hang-up may come before the REQ has read its READY: then the REQ says
# only "failed" (EPIPE), as it does at a peer that is no ZeroMQ socket (1 in 5 at a
# node's --send-dsn); asked again, a DEALER soon answers as one.
ATTEMPTS = 5


def kind_told(event: int | None) -> bool | None:
    """True: a ROUTER took the REQ's handshake; False: the peer hung up on it with no
    failure named, as a ZeroMQ socket of another kind does (a DEALER: --send-dsn);
    None: not told (no answer, a peer that is no ZeroMQ socket, or a refused or
    failed CURVE handshake, which under CURVE is also how a DEALER ends it)."""
    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        return True
    if event == zmq.EVENT_DISCONNECTED:
        return False
    return None


def ask_again(event: int | None) -> bool:
    """The handshake failed without a word: maybe a DEALER that hung up early."""
    return event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


def is_router(dsn: str, curve: ClientSecurity | None,
              timeout: float = reach.PROBE_TIMEOUT_S) -> bool | None:
    """Whether a ROUTER answers at ``dsn`` (for a CURVE node, one that takes
    ``curve``), as ``kind_told`` says, asked up to ATTEMPTS times."""
    for _ in range(ATTEMPTS):
        event = _handshake(dsn, curve, timeout)
        if not ask_again(event):
            break
    return kind_told(event)


def _handshake(dsn: str, curve: ClientSecurity | None, timeout: float) -> int | None:
    """How a REQ's handshake at ``dsn`` ended (the monitor's event); None when it did
    not within ``timeout``."""
    probe: Socket = zmq.Context.instance().socket(zmq.REQ)
    probe.setsockopt(zmq.LINGER, 0)
    plain_if_none(curve).apply(probe)
    monitor = probe.get_monitor_socket(HANDSHAKE_ENDED)
    try:
        dual_stack(probe, dsn)
        probe.connect(dsn)
        if not monitor.poll(int(timeout * 1000)):
            return None
        return int(recv_monitor_message(monitor)["event"])
    except zmq.ZMQError:
        return None  # the endpoint itself is wrong: the consumer's connect said how
    finally:
        probe.disable_monitor()
        monitor.close(0)
        probe.close(0)
