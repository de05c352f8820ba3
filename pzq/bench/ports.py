"""Whether loopback ports are free now, for runs that choose their nodes' ports."""

from __future__ import annotations

import socket
from collections.abc import Iterable


def ports_free(ports: Iterable[int]) -> bool:
    """Each port binds on 127.0.0.1 now (another program may take it before we do)."""
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True
