"""What answers at an endpoint a client is connected to but hears nothing from: the
security mechanism its ZeroMQ greeting names (whether it is a ROUTER: the client's
pzq.client.router_probe, which a group's consumer asks itself).

Neither probe completes a handshake after which a node could send it a delivery:
the greeting probe leaves once the peer has greeted, and a REQ socket pairs only
with ROUTER and REP sockets, which send nothing unasked.
"""

from __future__ import annotations

import socket
import time

from pzq import reach

# The start of ZMTP 3's greeting (RFC 23): the signature and the major version. A
# peer then sends its whole greeting (64 bytes), which names its mechanism; the probe
# offers none (a CURVE node closes at once on a greeting that offers NULL).
GREETING_START = b"\xff" + bytes(7) + b"\x01\x7f\x03"
GREETING_SIZE = 64
MECHANISM = slice(12, 32)

def mechanism(dsn: str, timeout: float = reach.PROBE_TIMEOUT_S) -> str | None:
    """The mechanism the ZeroMQ peer at ``dsn`` greets with (``NULL``, ``CURVE``); None
    when nothing greets as ZeroMQ does within ``timeout`` (or ``dsn`` is no tcp or
    ipc endpoint)."""
    deadline = time.monotonic() + timeout
    try:
        with _connected(dsn, timeout) as connection:
            connection.sendall(GREETING_START)
            greeting = b""
            while len(greeting) < GREETING_SIZE:
                connection.settimeout(max(0.001, deadline - time.monotonic()))
                chunk = connection.recv(GREETING_SIZE - len(greeting))
                if not chunk:
                    return None
                greeting += chunk
    except (OSError, ValueError):  # refused, timed out, no such file; ValueError: no tcp/ipc
        return None
    if greeting[0] != 0xFF or greeting[9] & 1 == 0 or greeting[10] < 3:
        return None  # not ZMTP 3
    return greeting[MECHANISM].rstrip(b"\0").decode("ascii", errors="replace")


def _connected(dsn: str, timeout: float) -> socket.socket:
    path = reach.ipc_path(dsn)
    if path is not None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(timeout)
        try:
            connection.connect("\0" + path[1:] if path.startswith("@") else path)
        except OSError:
            connection.close()
            raise
        return connection
    address = reach.tcp_address(dsn)
    if address is None:
        raise ValueError(f"{dsn} is no tcp or ipc endpoint")
    return socket.create_connection(address, timeout)
