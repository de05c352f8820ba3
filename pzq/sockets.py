"""Creating and binding the node's sockets, with the options each one needs, the one
IPv6 rule every pzq socket follows, and the files of its ipc endpoints, removed when
it stops (ZeroMQ leaves a named ipc endpoint's file behind)."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import zmq

from pzq import reach
from pzq.errors import BindError
from pzq.security import NO_CURVE, NodeSecurity
from pzq.zmqio import AnySocket, Context, Socket

# Producer ACKs must never be dropped: the receive ROUTER reports a full or gone
# peer (ROUTER_MANDATORY) instead of discarding silently, and has room for the
# ACKs of many producers' full windows before it says so.
RECEIVE_SNDHWM = 100_000
# Deliveries queued towards one consumer are already in flight with a deadline;
# keep that queue short so its ack timeouts do not run out while it waits.
SEND_SNDHWM = 256
LINGER_MS = 1000
CONSUME_SNDHWM = 200_000  # credits bound what is sent; the pipe must not
CONSUME_HEARTBEAT_MISSES = 3  # heartbeat periods without a PONG: the connection is cut
MAX_HEARTBEAT_TTL_MS = 6_553_500  # ZMTP carries the TTL in 16 bits of deciseconds
# A monitor request longer than pzq.protocol.frames.MONITOR_REQUEST_MAX (64 KiB) is
# answered ERROR; a frame longer than this is not even read (ZeroMQ's MAXMSGSIZE: it
# closes the sender's connection), so no client makes the node hold more for one.
MONITOR_FRAME_MAX = 1024 * 1024  # bytes
# --max-frame-size's default: four times --max-message-size's, so that a body a little
# over that is still read and answered, and a produce batch of many messages fits
MAX_FRAME_SIZE = 64 * 1024 * 1024  # bytes
# what libzmq's word for a host a bind cannot take leaves unsaid ("No such device" for
# a name that is neither an interface of this host nor one it resolves)
_BIND_TO = " (bind to an address or interface of this host, or * for every one)"
BIND_HINTS = {errno.ENODEV: _BIND_TO, errno.EADDRNOTAVAIL: _BIND_TO}
IPV4_HOST = re.compile(r"\d{1,3}(\.\d{1,3}){3}")


def bind(context: Context, kind: int, dsn: str, flag: str, security: NodeSecurity = NO_CURVE,
         options: dict[int, int] | None = None, cluster: bool = False,
         serve: Callable[[Socket], None] | None = None,
         watch: Callable[[Socket], None] | None = None) -> Socket:
    """``options`` are set before the bind: a listener copies the socket's options
    when it is bound, so a peer that connects later gets the high-water marks and
    heartbeats the socket had then, whatever is set after (libzmq 4.3). The cluster's
    endpoint (``cluster``) admits the peers' keys, the others the clients' (``serve``:
    an endpoint's own way, --send-dsn's). ``watch`` is called with the socket just
    before the bind (a monitor made then hears of every connection)."""
    refuse_live_ipc(dsn, flag)
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, LINGER_MS)  # unless ``options`` say otherwise
    for option, value in (options or {}).items():
        socket.setsockopt(option, value)
    dual_stack(socket, dsn)
    if serve is None:
        serve = security.serve_cluster if cluster else security.serve
    serve(socket)
    if watch is not None:
        watch(socket)
    try:
        socket.bind(dsn)
    except zmq.ZMQError as exc:
        socket.close(0)
        raise BindError(f"cannot bind {flag} {dsn}: {zmq.strerror(exc.errno or 0)}"
                        + BIND_HINTS.get(exc.errno or 0, "")) from None
    return socket


def refuse_live_ipc(dsn: str, flag: str) -> None:
    """ZeroMQ replaces an ipc socket file without asking: refuse when a process answers there.

    A file left behind by a process that is gone refuses connections, and is taken over.
    """
    if reach.ipc_path(dsn) is not None and reach.accepts_connections(dsn):
        raise BindError(f"cannot bind {flag} {dsn}: another process answers there "
                        "(another node running?)")


def dual_stack(socket: AnySocket, *endpoints: str) -> None:
    """pzq's one IPv6 rule, for every socket it binds or connects: IPv6 is on for a
    bracketed address, a wildcard host (bound on both families) and a host name
    (resolved either way); an IPv4 address stays IPv4."""
    socket.setsockopt(zmq.IPV6, any(_may_be_ipv6(endpoint) for endpoint in endpoints))


def _may_be_ipv6(endpoint: str) -> bool:
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[len("tcp://"):].rpartition(":")[0]
    return not IPV4_HOST.fullmatch(host)


def bound_endpoint(socket: Socket) -> str:
    """The endpoint actually bound, with a wildcard port resolved."""
    return socket.getsockopt_string(zmq.LAST_ENDPOINT)


@dataclass(frozen=True)
class SocketFile:
    """The file an ipc bind made, known by its inode: a file another node made at the
    same path since (after a bind there replaced it) is a different one."""

    path: str
    device: int
    inode: int


def socket_files(endpoints: Iterable[str]) -> list[SocketFile]:
    """The socket files of the bound ``endpoints`` (read right after the binds; none
    for tcp, inproc or Linux's abstract namespace, ``ipc://@name``)."""
    files = []
    for endpoint in endpoints:
        path = reach.ipc_path(endpoint)
        if path is None or path.startswith("@"):
            continue
        try:
            found = os.stat(path)
        except OSError:
            continue
        if stat.S_ISSOCK(found.st_mode):
            files.append(SocketFile(path, found.st_dev, found.st_ino))
    return files


def remove_socket_files(files: Iterable[SocketFile]) -> None:
    """Once the sockets are closed: remove each file that is still the one the bind
    made (ZeroMQ removes only those of ``ipc://*``), and leave a file another node
    made at that path since, which it still answers on."""
    for file in files:
        try:
            found = os.stat(file.path)
            if (found.st_dev, found.st_ino) == (file.device, file.inode):
                os.unlink(file.path)
        except OSError:
            pass  # gone already, or not ours to remove


def bind_receive(context: Context, dsn: str, security: NodeSecurity,
                 max_frame_size: int = MAX_FRAME_SIZE) -> Socket:
    """A frame over ``max_frame_size`` (--max-frame-size) is never read: ZeroMQ closes
    the producer's connection at its length, before it holds any of it."""
    return bind(context, zmq.ROUTER, dsn, "--receive-dsn", security,
                options={zmq.ROUTER_MANDATORY: 1, zmq.SNDHWM: RECEIVE_SNDHWM,
                         zmq.MAXMSGSIZE: max_frame_size})


def bind_send(context: Context, dsn: str, security: NodeSecurity,
              watch: Callable[[Socket], None] | None = None) -> Socket:
    # LINGER 0: what was not sent yet is still stored
    return bind(context, zmq.DEALER, dsn, "--send-dsn", security,
                options={zmq.SNDHWM: SEND_SNDHWM, zmq.LINGER: 0}, serve=security.serve_send,
                watch=watch)


def bind_monitor(context: Context, dsn: str, security: NodeSecurity) -> Socket:
    return bind(context, zmq.ROUTER, dsn, "--monitor-dsn", security,
                options={zmq.MAXMSGSIZE: MONITOR_FRAME_MAX})


def bind_consume(context: Context, dsn: str, security: NodeSecurity,
                 heartbeat_ms: int, watch: Callable[[Socket], None] | None = None) -> Socket:
    """Consumer groups: ROUTER_MANDATORY, so a send to a consumer that is gone says so
    (its deliveries are given back) and a full pipe refuses instead of dropping.
    ZeroMQ's own heartbeats (PING and PONG, answered by each side's I/O thread, not
    by the consumer's code) close a connection that stays silent for
    CONSUME_HEARTBEAT_MISSES periods; the TTL asks the consumer's side to do the same."""
    heartbeat_ms = max(1, heartbeat_ms)  # 0 would turn them off
    silent_ms = CONSUME_HEARTBEAT_MISSES * heartbeat_ms
    return bind(context, zmq.ROUTER, dsn, "--consume-dsn", security,
                options={zmq.ROUTER_MANDATORY: 1, zmq.SNDHWM: CONSUME_SNDHWM,
                         zmq.HEARTBEAT_IVL: heartbeat_ms, zmq.HEARTBEAT_TIMEOUT: silent_ms,
                         zmq.HEARTBEAT_TTL: min(silent_ms, MAX_HEARTBEAT_TTL_MS)},
                watch=watch)
