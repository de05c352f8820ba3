"""The ``--nodes`` hosts that have no address at the node's start, looked up once
before the loop runs, each in a thread of its own, for at most ``BOUND_S`` in all.

ZeroMQ tries a host that does not resolve again forever and says nothing: the peer
was only ``peer_never_reached``. A host without an address is a warning, not a
refusal (its DNS entry may come later, and ZeroMQ will then connect); a literal IP
address needs no lookup.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Sequence

from pzq import reach
from pzq.logs import get_logger

log = get_logger("pzq.cluster")

BOUND_S = 1.0  # the start waits no longer for the resolver


def unresolved(endpoints: Sequence[str], bound_s: float = BOUND_S) -> dict[str, tuple[str, str]]:
    """Endpoint -> (its host, why it has no address) for each tcp endpoint whose host
    did not resolve within ``bound_s`` seconds."""
    hosts = {endpoint: address for endpoint in endpoints
             if (address := reach.tcp_address(endpoint)) is not None
             and not _literal(address[0])}
    said: dict[str, str] = {}  # endpoint -> why ("": resolved), set by its thread
    threads = [threading.Thread(target=_look_up, args=(endpoint, address, said), daemon=True,
                                name="pzq-resolve") for endpoint, address in hosts.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + bound_s
    for thread in threads:  # a resolver that hangs is left to end on its own
        thread.join(max(0.0, deadline - time.monotonic()))
    found = dict(said)
    return {endpoint: (address[0], found.get(endpoint) or
                       f"the resolver did not answer within {bound_s:g} s")
            for endpoint, address in hosts.items() if found.get(endpoint) != ""}


def warn_unresolved(endpoints: Sequence[str], bound_s: float = BOUND_S) -> None:
    for endpoint, (host, why) in unresolved(endpoints, bound_s).items():
        log.warning("peer_host_unresolved", endpoint=endpoint, host=host, reason=why)


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.partition("%")[0])  # fe80::1%eth0: a scope, no name
    except ValueError:
        return False
    return True


def _look_up(endpoint: str, address: tuple[str, int], said: dict[str, str]) -> None:
    try:
        socket.getaddrinfo(*address, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        said[endpoint] = f"it does not resolve ({exc.strerror})"
        return
    except OSError:
        pass  # not the host's fault (a port the resolver refuses): the connection says
    said[endpoint] = ""
