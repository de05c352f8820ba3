"""The fault proxy itself: real TCP sockets on loopback, and real ZeroMQ through it."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import zmq

from tests.support.faultproxy import DOWN, UP, ProxyNetwork
from tests.support.harness import wait_until
from tests.support.zmtp_ping import PingRewriter, encode_zmtp_frame

pytestmark = [pytest.mark.partition, pytest.mark.timeout(30)]

TIMEOUT = 5.0


@pytest.fixture
def network() -> Iterator[ProxyNetwork]:
    with ProxyNetwork() as proxies:
        yield proxies


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(TIMEOUT)
    yield server
    server.close()


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


def connect(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), TIMEOUT)
    client.settimeout(TIMEOUT)
    return client


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def refused(port: int) -> bool:
    """A new connection is refused, or ends at once without data."""
    try:
        client = connect(port)
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    with client:
        return ends_without_data(client)


def ends_without_data(sock: socket.socket) -> bool:
    """The connection ends (FIN or RST) before a single byte arrives."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def wait_dropped(network: ProxyNetwork, direction: str, size: int) -> None:
    wait_until(lambda: network.dropped("a>b", direction) >= size, TIMEOUT,
               message=f"{size} bytes dropped {direction}")


def open_pair(network: ProxyNetwork, listener: socket.socket,
              name: str = "a>b") -> tuple[socket.socket, socket.socket]:
    if name not in network.proxies:
        network.add(name, port_of(listener))
    client = connect(network.proxies[name].port)
    server, _ = listener.accept()
    server.settimeout(TIMEOUT)
    return client, server


def test_bytes_pass_both_ways(network, listener):
    client, server = open_pair(network, listener)
    with client, server:
        client.sendall(b"request")
        assert read_exactly(server, 7) == b"request"
        server.sendall(b"answer")
        assert read_exactly(client, 6) == b"answer"


def test_a_blackhole_drops_both_ways_and_the_heal_resets_the_connection(network, listener):
    client, server = open_pair(network, listener)
    with client, server:
        network.blackhole(["a>b"])
        client.sendall(b"lost request")
        server.sendall(b"lost answer")
        wait_dropped(network, UP, 12)
        wait_dropped(network, DOWN, 11)
        network.heal(["a>b"])
        # The stream had a gap: it ends at the heal, before any dropped byte arrives.
        assert ends_without_data(server)
        assert ends_without_data(client)
    again, server = open_pair(network, listener)
    with again, server:
        again.sendall(b"after")
        assert read_exactly(server, 5) == b"after"


def test_a_connection_made_during_a_blackhole_carries_nothing(network, listener):
    network.add("a>b", port_of(listener))
    network.blackhole(["a>b"])
    client, server = open_pair(network, listener)
    with client, server:
        client.sendall(b"hello")
        wait_dropped(network, UP, 5)
        network.heal(["a>b"])
        assert ends_without_data(server)


def test_one_way_drop_keeps_the_other_direction(network, listener):
    client, server = open_pair(network, listener)
    with client, server:
        network.drop(["a>b"], UP)
        client.sendall(b"dropped")
        server.sendall(b"still flows")
        assert read_exactly(client, 11) == b"still flows"
        wait_dropped(network, UP, 7)
        network.heal(["a>b"])
        assert ends_without_data(server)


def test_dropping_answers_only(network, listener):
    client, server = open_pair(network, listener)
    with client, server:
        network.drop(["a>b"], DOWN)
        client.sendall(b"arrives")
        assert read_exactly(server, 7) == b"arrives"
        server.sendall(b"dropped")
        wait_dropped(network, DOWN, 7)
        network.heal(["a>b"])
        assert ends_without_data(client)


def test_reset_closes_connections_and_refuses_new_ones_until_healed(network, listener):
    client, server = open_pair(network, listener)
    with client, server:
        network.reset(["a>b"])
        assert ends_without_data(client)
        assert ends_without_data(server)
    assert refused(network.proxies["a>b"].port)
    network.heal(["a>b"])
    client, server = open_pair(network, listener)
    with client, server:
        client.sendall(b"back")
        assert read_exactly(server, 4) == b"back"


def test_latency_delays_each_direction_and_keeps_the_order(network, listener):
    client, server = open_pair(network, listener)
    with client, server:
        network.delay(["a>b"], 0.2)
        started = time.monotonic()
        for part in (b"one", b"two", b"six"):
            client.sendall(part)
        assert read_exactly(server, 9) == b"onetwosix"
        server.sendall(b"ok")
        assert read_exactly(client, 2) == b"ok"
        assert time.monotonic() - started >= 0.4


def test_a_dead_target_is_refused(network, listener):
    network.add("a>b", port_of(listener))
    listener.close()
    assert refused(network.proxies["a>b"].port)


# -- the PING rewrite ------------------------------------------------------------------


def zmtp_message(*frames: bytes) -> bytes:
    return b"".join(encode_zmtp_frame(0x01 if i < len(frames) - 1 else 0, frame)
                    for i, frame in enumerate(frames))


def test_the_rewriter_replaces_only_the_ping_endpoint_at_any_chunking():
    greeting = bytes(range(64))
    ready = bytes([0x04, 5]) + b"READY"
    body = b"x" * 300  # a long frame
    stream = (greeting + ready + zmtp_message(b"PING", b"node-1", b"tcp://127.0.0.1:1")
              + zmtp_message(b"REPLICATE", body) + zmtp_message(b"PING", b"x"))
    expected = (greeting + ready + zmtp_message(b"PING", b"node-1", b"tcp://proxy:2")
                + zmtp_message(b"REPLICATE", body) + zmtp_message(b"PING", b"x"))
    for chunk in (1, 7, 64, 1000):
        rewriter = PingRewriter("tcp://proxy:2")
        out = b"".join(rewriter.feed(stream[i:i + chunk]) for i in range(0, len(stream), chunk))
        assert out == expected, chunk


@pytest.fixture
def router_and_dealer(context: zmq.Context) -> Iterator[tuple[zmq.Socket, zmq.Socket]]:
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    yield router, dealer
    router.close(0)
    dealer.close(0)


def test_zeromq_through_the_proxy_sees_the_announced_endpoint(network, router_and_dealer):
    router, dealer = router_and_dealer
    port = router.bind_to_random_port("tcp://127.0.0.1")
    proxy = network.add("a>b", port, announce_as="tcp://127.0.0.1:9")
    dealer.connect(proxy.endpoint)
    dealer.send_multipart([b"PING", b"node", b"tcp://127.0.0.1:1"])
    dealer.send_multipart([b"OTHER", b"y" * 1000])
    assert router.poll(TIMEOUT * 1000)
    peer, *frames = router.recv_multipart()
    assert frames == [b"PING", b"node", b"tcp://127.0.0.1:9"]
    assert router.recv_multipart()[1:] == [b"OTHER", b"y" * 1000]
    router.send_multipart([peer, b"PONG"])
    assert dealer.poll(TIMEOUT * 1000)
    assert dealer.recv_multipart() == [b"PONG"]
