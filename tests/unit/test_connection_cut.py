"""Cutting the connections an endpoint accepted: real sockets of this process, on
loopback and on an ipc file; the listener and every other connection are left alone."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from pzq.connection_cut import accepted_at, cut_accepted

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def sockets() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def listener(stack: ExitStack, family: int = socket.AF_INET,
             address: object = ("127.0.0.1", 0)) -> socket.socket:
    made = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
    made.bind(address)
    made.listen()
    return made


def connected(stack: ExitStack, server: socket.socket) -> tuple[socket.socket, socket.socket]:
    """A client connected to ``server`` and the server's end of it."""
    client = stack.enter_context(socket.socket(server.family, socket.SOCK_STREAM))
    client.connect(server.getsockname())
    accepted, _ = server.accept()
    stack.enter_context(accepted)
    return client, accepted


def ended(client: socket.socket) -> bool:
    """The server's end was shut down: the client reads the end of the stream."""
    client.settimeout(5)
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True


def still_open(client: socket.socket) -> bool:
    client.setblocking(False)
    try:
        client.recv(1)
    except BlockingIOError:
        return True
    return False


def test_every_connection_accepted_at_the_endpoint_is_cut_and_no_other(sockets):
    server, other_server = listener(sockets), listener(sockets)
    port = server.getsockname()[1]
    clients = [connected(sockets, server)[0] for _ in range(3)]
    other_client, _ = connected(sockets, other_server)
    # this process's own connection out to the other listener: its own port is no
    # endpoint's, so it is not the endpoint's either
    assert cut_accepted({"receive": f"tcp://127.0.0.1:{port}", "idle": "inproc://idle"}) \
        == {"receive": 3, "idle": 0}
    assert all(ended(client) for client in clients)
    assert still_open(other_client)
    late, _ = connected(sockets, server)  # the listener goes on
    assert still_open(late)


def test_a_wildcard_endpoint_cuts_at_every_address_of_its_port(sockets):
    server = listener(sockets, address=("0.0.0.0", 0))
    port = server.getsockname()[1]
    client, _ = connected(sockets, server)
    assert cut_accepted({"send": f"tcp://0.0.0.0:{port}"}) == {"send": 1}
    assert ended(client)


def test_an_ipc_endpoint_cuts_its_files_connections(sockets, tmp_path):
    path = str(tmp_path / "node.sock")
    server = listener(sockets, socket.AF_UNIX, path)
    other = listener(sockets, socket.AF_UNIX, str(tmp_path / "other.sock"))
    client, _ = connected(sockets, server)
    other_client, _ = connected(sockets, other)
    assert cut_accepted({"monitor": f"ipc://{path}"}) == {"monitor": 1}
    assert ended(client)
    assert still_open(other_client)


@pytest.mark.parametrize(("endpoint", "address", "accepted"), [
    ("tcp://127.0.0.1:5000", ("127.0.0.1", 5000), True),
    ("tcp://127.0.0.1:5000", ("127.0.0.1", 5001), False),
    ("tcp://127.0.0.1:5000", ("10.0.0.1", 5000), False),
    ("tcp://[::]:5000", ("::ffff:10.0.0.1", 5000, 0, 0), True),
    ("tcp://127.0.0.1:5000", ("::ffff:127.0.0.1", 5000, 0, 0), True),
    ("tcp://[::1]:5000", ("::1", 5000, 0, 0), True),
    ("ipc:///tmp/a", "/tmp/a", True),
    ("ipc:///tmp/a", "/tmp/b", False),
    ("ipc://@node", b"\0node", True),
    ("ipc:///tmp/a", ("127.0.0.1", 5000), False),
])
def test_what_an_endpoints_connection_has_for_its_own_address(endpoint, address, accepted):
    matcher = accepted_at(endpoint)
    assert matcher is not None and matcher(address) is accepted


def test_inproc_has_no_connection_to_cut():
    assert accepted_at("inproc://pzq") is None
