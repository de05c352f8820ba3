"""What the clients share: connecting, with pzq's one IPv6 rule, and deadlines."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pzq.security import ClientSecurity, plain_if_none
from pzq.sockets import dual_stack
from pzq.zmqio import AnySocket

NOTICE_AFTER_S = 1.0  # silence after which a waiting tool says what it waits for
WaitNotice = Callable[[], None]  # called once a wait has lasted NOTICE_AFTER_S


def connect(socket: AnySocket, dsn: str | Sequence[str],
            curve: ClientSecurity | None = None) -> None:
    """Connect to one endpoint, or to several (a list: the socket spreads over them)."""
    plain_if_none(curve).apply(socket)
    endpoints = [dsn] if isinstance(dsn, str) else list(dsn)
    dual_stack(socket, *endpoints)
    for endpoint in endpoints:
        socket.connect(endpoint)


def remaining_ms(deadline: float | None) -> int | None:
    """Milliseconds left until a monotonic ``deadline``; None waits for ever."""
    if deadline is None:
        return None
    return max(0, int((deadline - time.monotonic()) * 1000))
