"""Whether a ROUTER answers at an endpoint: a group's consumer heard nothing to its
CONSUME, and at a node's --send-dsn (a DEALER, which takes a DEALER's connection and
never answers) it would hear nothing until its timeout.

A REQ socket pairs only with ROUTER and REP sockets, which send nothing unasked: its
handshake succeeds at a ROUTER, and a DEALER hangs up on it once the two have said
their kinds. ``kind_told`` reads how the handshake ended (shared with the asyncio
probe, pzq.aio.probe.is_router); ``is_router`` shakes hands, blocking.
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


def kind_told(event: int | None) -> bool | None:
    """True: a ROUTER took the REQ's handshake; False: the peer hung up on it with no
    failure named, as a socket of another kind does (a DEALER: --send-dsn); None: not
    told (no answer, or a refused or failed CURVE handshake, which under CURVE is
    also how a DEALER ends it)."""
    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        return True
    if event == zmq.EVENT_DISCONNECTED:
        return False
    return None


def is_router(dsn: str, curve: ClientSecurity | None,
              timeout: float = reach.PROBE_TIMEOUT_S) -> bool | None:
    """Whether a ROUTER answers at ``dsn`` (for a CURVE node, one that takes
    ``curve``), as ``kind_told`` says."""
    probe: Socket = zmq.Context.instance().socket(zmq.REQ)
    probe.setsockopt(zmq.LINGER, 0)
    plain_if_none(curve).apply(probe)
    monitor = probe.get_monitor_socket(HANDSHAKE_ENDED)
    try:
        dual_stack(probe, dsn)
        probe.connect(dsn)
        if not monitor.poll(int(timeout * 1000)):
            return None
        return kind_told(int(recv_monitor_message(monitor)["event"]))
    except zmq.ZMQError:
        return None  # the endpoint itself is wrong: the consumer's connect said how
    finally:
        probe.disable_monitor()
        monitor.close(0)
        probe.close(0)
