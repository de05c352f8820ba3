"""Whether some process accepts connections at an endpoint, told by a plain socket.

A plain ``connect`` needs no ZeroMQ handshake, so it also tells a live node from a
dead one when the handshake would be refused (CURVE). It answers ``None`` for
transports it cannot probe and for addresses it cannot resolve; ``unresolvable``
tells the latter, which no wait mends (ZeroMQ would try again forever).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence

PROBE_TIMEOUT_S = 0.5
# What a node out of file descriptors logs (pzq.node.descriptors)
OUT_OF_DESCRIPTORS = "its log says descriptors_running_out"


def ipc_path(dsn: str) -> str | None:
    """The file system path of an ``ipc://`` endpoint (None for others and wildcards)."""
    if not dsn.startswith("ipc://"):
        return None
    path = dsn[len("ipc://"):]
    return None if path in ("", "*") else path


def tcp_address(dsn: str) -> tuple[str, int] | None:
    """Host and port to connect to for a ``tcp://`` endpoint; a wildcard host is this host."""
    if not dsn.startswith("tcp://"):
        return None
    host, _, port = dsn[len("tcp://"):].rpartition(":")
    if not port.isdigit():
        return None
    host = host.split(";")[-1]  # a source address may precede the peer: tcp://src;host:port
    host = host.strip("[]")
    if host in ("*", "0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return host, int(port)


def unresolvable(dsn: str) -> str | None:
    """Why the host of a ``tcp://`` endpoint has no address (None: it has, or not tcp)."""
    address = tcp_address(dsn)
    if address is None:
        return None
    try:
        socket.getaddrinfo(*address, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"host {address[0]} does not resolve ({exc.strerror})"
    except OSError:
        return None  # e.g. a port the resolver refuses: let the connection say more
    return None


def accepts_connections(dsn: str, timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """True: a process accepts connections at ``dsn``; False: none does; None: cannot tell."""
    path = ipc_path(dsn)
    if path is not None:
        return _unix_accepts(path, timeout)
    address = tcp_address(dsn)
    if address is not None:
        return _tcp_accepts(address, timeout)
    return None


def _unix_accepts(path: str, timeout: float) -> bool | None:
    # Linux's abstract namespace: a leading '@' names no file.
    target = "\0" + path[1:] if path.startswith("@") else path
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(target)
    except (FileNotFoundError, ConnectionRefusedError):
        return False  # absent, or a file left behind by a process that is gone
    except OSError:
        return None  # e.g. no permission: let the bind itself say what is wrong
    finally:
        probe.close()
    return True


def _tcp_accepts(address: tuple[str, int], timeout: float) -> bool | None:
    try:
        with socket.create_connection(address, timeout):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return None  # unresolvable host, unreachable network, no answer in time


def why_silent(dsn: str, curve: bool, timeout: float = PROBE_TIMEOUT_S) -> str:
    """The likely reason an endpoint that should answer does not, in words to act on."""
    answers = accepts_connections(dsn, timeout)
    return silence(answers, unresolvable(dsn) if answers is None else None, curve)


def each_named(dsns: Sequence[str], reasons: Iterable[str]) -> str:
    """Several endpoints' reasons in one line, each named."""
    return "; ".join(f"{dsn}: {reason}" for dsn, reason in zip(dsns, reasons, strict=True))


def silence(answers: bool | None, unresolved: str | None, curve: bool) -> str:
    """``why_silent``'s words, from what a probe found: whether a process accepts
    connections there (None: cannot tell) and why its host does not resolve (None:
    it does); the asyncio clients probe without blocking and say the same."""
    if answers is False:
        return "nothing answers there (is the node running?)"
    if answers is None:
        return unresolved or "still connecting"
    # The kernel completes a connection to a node out of descriptors, which ZeroMQ then
    # never accepts: from here it looks like any other silence.
    if curve:  # pzq.curve_probe tells which, given the client's keys
        return ("it accepts connections but does not answer: a busy node, one out of "
                f"file descriptors ({OUT_OF_DESCRIPTORS}), or one that refused this "
                "client's CURVE handshake (its --curve-server-key not the node's public "
                "key, or its public key not among the node's authorized keys)")
    return ("it accepts connections but does not answer: a busy node, one out of file "
            f"descriptors ({OUT_OF_DESCRIPTORS}), not a pzq endpoint, or a node that "
            "requires CURVE (--curve-client-key, --curve-server-key)")
