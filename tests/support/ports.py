"""Ports for test nodes that restart on the ports they were first given."""

from __future__ import annotations

import random
import socket


def port_below_ephemeral() -> int:
    """A free port below the range the kernel hands out for port 0 and outgoing
    connections (32768 and up on Linux): a node stopped or killed and restarted binds
    it again, and meanwhile no connection of another process can be given it."""
    for _ in range(200):
        port = random.randrange(20_000, 32_700)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port on 127.0.0.1 below 32700")
