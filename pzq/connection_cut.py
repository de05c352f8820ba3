"""The connections a bound endpoint accepted, cut: each TCP or ipc connection this
process holds whose own address is the endpoint's is shut down (``shutdown``, both
ways), and ZeroMQ, reading its end, drops it as it drops one its peer closed; the
peer connects again and its next handshake asks ZAP again.

ZeroMQ asks ZAP at a connection's handshake only, and tells no socket which key a
connection came with, so a key removed by a reload is cut off by cutting every
connection of each endpoint that admits it: the clients of the keys still admitted
are back after ZeroMQ's reconnect (0.1 s), the removed key's are refused.

The descriptors are ZeroMQ's, used by its I/O threads: each is looked at through a
duplicate of its own (``dup``), so a descriptor closed and given to another file in
between is never shut down, and none is closed here. Only where the system lists a
process's descriptors (Linux's /proc/self/fd, /dev/fd elsewhere); inproc:// has no
connection to cut.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from pzq import reach

DESCRIPTOR_LISTS = (Path("/proc/self/fd"), Path("/dev/fd"))
WILDCARDS = frozenset({"0.0.0.0", "::", "*"})

Address = str | bytes | tuple[object, ...]
Accepted = Callable[[Address], bool]  # a connection's own address: made at the endpoint?


def cut_accepted(endpoints: Mapping[str, str]) -> dict[str, int]:
    """Cuts every connection accepted at each of ``endpoints`` (name: the bound
    endpoint, wildcard ports resolved); how many were cut at each name."""
    matchers = {name: matcher for name, endpoint in endpoints.items()
                if (matcher := accepted_at(endpoint)) is not None}
    cut = dict.fromkeys(endpoints, 0)
    for descriptor in _descriptors():
        name = _cut_if_accepted(descriptor, matchers)
        if name is not None:
            cut[name] += 1
    return cut


def accepted_at(endpoint: str) -> Accepted | None:
    """What a connection accepted at ``endpoint`` has for its own address (None for a
    transport whose connections have no descriptor of their own here)."""
    path = reach.ipc_path(endpoint)
    if path is not None:
        wanted = path.encode()
        if path.startswith("@"):  # Linux's abstract namespace: a NUL for the @
            wanted = b"\0" + wanted[1:]
        return lambda address: _unix_name(address) == wanted
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port_text = endpoint[len("tcp://"):].rpartition(":")
    if not port_text.isdigit():
        return None
    port, host = int(port_text), host.strip("[]")
    any_host = host in WILDCARDS

    def accepted(address: Address) -> bool:
        if not isinstance(address, tuple) or len(address) < 2 or address[1] != port:
            return False
        return any_host or _same_host(str(address[0]), host)
    return accepted


def _descriptors() -> list[int]:
    for listed in DESCRIPTOR_LISTS:
        try:
            return [int(name) for name in os.listdir(listed) if name.isdigit()]
        except OSError:
            continue
    return []


def _cut_if_accepted(descriptor: int, matchers: Mapping[str, Accepted]) -> str | None:
    try:
        if not stat.S_ISSOCK(os.fstat(descriptor).st_mode):
            return None
        pinned = os.dup(descriptor)  # this socket, whatever the number is given to next
    except OSError:
        return None  # closed in between
    try:
        connection = socket.socket(fileno=pinned)
    except OSError:
        os.close(pinned)
        return None
    with connection:
        try:
            if connection.type != socket.SOCK_STREAM:
                return None
            own = connection.getsockname()
            connection.getpeername()  # a listener has no peer: ENOTCONN
        except OSError:
            return None
        for name, accepted in matchers.items():
            if accepted(own):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    return None  # ended already
                return name
    return None


def _unix_name(address: Address) -> bytes | None:
    if isinstance(address, str):
        return address.encode()
    return address if isinstance(address, bytes) else None


def _same_host(found: str, bound: str) -> bool:
    try:
        found_ip, bound_ip = ipaddress.ip_address(found), ipaddress.ip_address(bound)
    except ValueError:
        return found == bound
    if isinstance(found_ip, ipaddress.IPv6Address) and found_ip.ipv4_mapped is not None:
        found_ip = found_ip.ipv4_mapped
    if isinstance(bound_ip, ipaddress.IPv6Address) and bound_ip.ipv4_mapped is not None:
        bound_ip = bound_ip.ipv4_mapped
    return found_ip == bound_ip
