"""Why a node does not take this client's CURVE handshake, told by a socket that only
shakes hands and watches how it ends.

A client whose handshake fails hears nothing: ZeroMQ tries again, quietly. The
socket's monitor tells the cases apart: the node's ZAP refused the client's public
key (``HANDSHAKE_FAILED_AUTH``: not among its authorized keys, or on --send-dsn one
its --authorization rules keep off it); the node could not
read the client's first command, sealed for a server key that is not its own, and
hung up (``HANDSHAKE_FAILED_NO_DETAIL``); the node serves no CURVE at all (a
mechanism mismatch).
"""

from __future__ import annotations

from collections.abc import Sequence

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq import endpoint_probe, reach
from pzq.security import PLAIN, ClientSecurity, plain_if_none
from pzq.sockets import dual_stack

EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
          | zmq.EVENT_CONNECT_RETRIED)  # nothing there: not told, without a wait
HANDSHAKE_ENDED = EVENTS & ~zmq.EVENT_CONNECT_RETRIED
# --send-dsn's ZAP refuses a key its --authorization rules keep off it as it refuses an
# unknown key (the same status): the handshake cannot tell them apart, so both are named
CLIENT_KEY_REFUSED = ("the node refused this client's public key (--curve-client-key): it is "
                      "not among the keys in the node's --curve-authorized-keys (or, on "
                      "--send-dsn, the node's --authorization rules give it no *:default)")
SERVER_KEY_WRONG = ("the node could not read this client's CURVE handshake: the server key "
                    "given (--curve-server-key) does not match the node's public key")
NO_CURVE_THERE = ("the node does not serve CURVE (started without --curve-secret-key?): "
                  "leave out --curve-client-key and --curve-server-key")
CURVE_REQUIRED = ("the node requires CURVE (its greeting names it): give --curve-client-key "
                  "and --curve-server-key (in Python, curve=ClientCurve(...))")


def why_silent(dsn: str | Sequence[str], curve: ClientSecurity | None,
               timeout: float = reach.PROBE_TIMEOUT_S) -> str:
    """reach.why_silent, and for a CURVE client that reaches a process there, what the
    node says to its handshake (several endpoints: each one's, named)."""
    if not isinstance(dsn, str):
        return reach.each_named(dsn, [why_silent(each, curve, timeout) for each in dsn])
    curve = plain_if_none(curve)
    if curve.on:
        ended = _handshake(dsn, curve, timeout)
        if answered(ended):
            plain = _handshake(dsn, PLAIN, timeout) if hung_up(ended) else None
            return told(ended, plain)
    elif reach.accepts_connections(dsn, timeout):
        refused = plain_refusal(endpoint_probe.mechanism(dsn, timeout))
        if refused is not None:
            return refused
    return reach.why_silent(dsn, curve.on, timeout)


def answered(ended: Ended) -> bool:
    """The node answered the CURVE handshake, taken or refused: a process is there, and
    no plain connection need ask. A CURVE node logs one that leaves mid-handshake as a
    refused client (pzq.handshakes.LEFT), which the probe would be; the handshake with
    the client's own key is logged as that key's refusal, counted with the client's."""
    return ended is not None and bool(ended[0] & HANDSHAKE_ENDED)


def told(ended: Ended, plain: Ended) -> str:
    """Why a CURVE client hears nothing from a node that ``answered`` its handshake:
    ``refusal``'s words, or (the handshake taken) a silent node's."""
    return refusal(ended, plain) or reach.silence(True, None, curve=True)


def plain_refusal(mechanism: str | None) -> str | None:
    """Why a node refuses a client without keys, from the mechanism its greeting names
    (None: not told, or not CURVE). A handshake alone cannot say: a CURVE node often
    hangs up before its greeting is read, as a server of another protocol does."""
    return CURVE_REQUIRED if mechanism == "CURVE" else None


def handshake_verdict(dsn: str, curve: ClientSecurity,
                      timeout: float) -> tuple[bool, str | None]:
    """Whether the node at ``dsn`` answered ``curve``'s handshake (``answered``), and
    why it refused it (None: it took it, or nothing was told within ``timeout`` s)."""
    ended = _handshake(dsn, curve, timeout)
    if not answered(ended):
        return False, None
    plain = _handshake(dsn, PLAIN, timeout) if hung_up(ended) else None
    return True, refusal(ended, plain)


Ended = tuple[int, int] | None  # how a handshake ended: its monitor's event and value


def hung_up(ended: Ended) -> bool:
    """The node hung up without a word: a handshake without keys tells why (a node
    without CURVE may hang up as soon as it reads the greeting, too)."""
    return ended is not None and ended[0] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


def probe_timeout(timeout: float | None) -> float:
    """How long a client that waited ``timeout`` s (None: for ever) gives its probe."""
    return min(timeout or 1, reach.PROBE_TIMEOUT_S)


def refusal(ended: Ended, plain: Ended) -> str | None:
    """Why a handshake with the client's keys ended as it did (``plain``: how one
    without keys ended, asked when the node ``hung_up``); None: not refused, or not
    told. The asyncio clients shake hands without blocking and judge here too."""
    if ended is None:
        return None
    event, value = ended
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return CLIENT_KEY_REFUSED
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        # the node that takes a handshake without keys serves no CURVE
        return NO_CURVE_THERE if plain and plain[0] == zmq.EVENT_HANDSHAKE_SUCCEEDED \
            else SERVER_KEY_WRONG
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return NO_CURVE_THERE
        return f"the CURVE handshake broke off (ZeroMQ protocol error {value:#x})"
    return None  # it succeeded: the keys are not the reason


def _handshake(dsn: str, curve: ClientSecurity, timeout: float) -> Ended:
    """How a handshake at ``dsn`` ended (its monitor's event and value); None when it
    did not within ``timeout`` or the endpoint cannot be connected to."""
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    monitor = socket.get_monitor_socket(EVENTS)
    try:
        dual_stack(socket, dsn)
        curve.apply(socket)
        socket.connect(dsn)
        if not monitor.poll(int(timeout * 1000)):
            return None
        event = recv_monitor_message(monitor)
        return int(event["event"]), int(event["value"])
    except zmq.ZMQError:
        return None  # the endpoint itself is wrong: the caller's connect says how
    finally:
        socket.disable_monitor()
        monitor.close()
        socket.close()
