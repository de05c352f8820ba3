"""Binding: an ipc endpoint a live node answers on is never taken over; a stale one is."""

from __future__ import annotations

import contextlib
import socket
from functools import partial

import pytest
import zmq

from pzq import reach, sockets
from pzq.client import request_monitor
from pzq.errors import ExitCode
from pzq.security import NO_CURVE
from tests.support.harness import run_pzq

EXIT_BIND = ExitCode.BIND

pytestmark = pytest.mark.timeout(60)
WILDCARDS = ["--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*"]


def test_a_second_node_refuses_a_live_ipc_monitor(start_node, tmp_path):
    monitor = f"ipc://{tmp_path}/monitor"
    first = start_node("--monitor-dsn", monitor)
    result = run_pzq(["--database", str(tmp_path / "second"), *WILDCARDS,
                      "--monitor-dsn", monitor])
    assert result.returncode == EXIT_BIND
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and monitor in lines[0] and "another process answers" in lines[0]
    assert request_monitor(monitor, "PING", 5.0) == b"PONG"
    assert first.running


def test_a_stale_ipc_file_of_a_dead_node_is_taken_over(start_node, tmp_path):
    monitor = f"ipc://{tmp_path}/monitor"
    start_node("--monitor-dsn", monitor).kill()
    assert (tmp_path / "monitor").exists()  # SIGKILL left the socket file behind
    assert reach.accepts_connections(monitor) is False
    second = start_node("--monitor-dsn", monitor)
    assert second.monitor_dsn == monitor
    assert request_monitor(monitor, "PING", 5.0) == b"PONG"


def test_a_stopped_node_removes_its_ipc_files_but_not_another_nodes(start_inproc_node,
                                                                     tmp_path):
    """ZeroMQ leaves a named ipc endpoint's file behind; a node that stops removes the
    files its binds made, and not one another node made at such a path since (the
    nodes in this process: their stop is the daemon's)."""
    roles = ("receive", "send", "monitor", "consume")
    first = start_inproc_node(*[arg for role in roles
                                for arg in (f"--{role}-dsn", f"ipc://{tmp_path}/{role}")],
                              tcp=True)
    assert all((tmp_path / role).is_socket() for role in roles)
    (tmp_path / "monitor").unlink()  # as a second node's bind there would replace it
    second = start_inproc_node("--monitor-dsn", f"ipc://{tmp_path}/monitor",
                               database=tmp_path / "second", consume=False, tcp=True)
    assert first.stop() == 0
    assert sorted(path.name for path in tmp_path.iterdir() if path.is_socket()) == ["monitor"]
    assert request_monitor(second.monitor_dsn, "PING", 5.0) == b"PONG"
    assert second.stop() == 0
    assert not (tmp_path / "monitor").exists()


def test_any_ipc_endpoint_is_protected(tmp_path):
    path = tmp_path / "receive"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    try:
        result = run_pzq(["--database", str(tmp_path / "db"), "--receive-dsn", f"ipc://{path}",
                          "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    finally:
        listener.close()
    assert result.returncode == EXIT_BIND
    assert f"cannot bind --receive-dsn ipc://{path}" in result.stderr


@pytest.mark.parametrize("dsn, expected", [
    ("tcp://*:11131", ("127.0.0.1", 11131)),
    ("tcp://[::1]:5", ("::1", 5)),
    ("tcp://10.0.0.1;example.org:7", ("example.org", 7)),
    ("tcp://host", None),
    ("ipc:///x", None),
])
def test_tcp_address(dsn, expected):
    assert reach.tcp_address(dsn) == expected


def test_probes_tell_a_listener_from_nothing(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        assert reach.accepts_connections(f"tcp://127.0.0.1:{port}") is True
    finally:
        listener.close()
    assert reach.accepts_connections(f"tcp://127.0.0.1:{port}") is False
    assert reach.accepts_connections(f"ipc://{tmp_path}/absent") is False
    assert reach.accepts_connections("inproc://x") is None


def queued_until_full(node_socket, peer, frames: list[bytes]) -> int:
    """Sends to ``peer`` without waiting until the pipe says full (peer not reading)."""
    count = 0
    with contextlib.suppress(zmq.Again):
        while count < 1_000_000:
            node_socket.send_multipart(frames, zmq.NOBLOCK)
            count += 1
    return count


@pytest.mark.parametrize("bind_endpoint, hwm, routed, size", [
    (sockets.bind_receive, sockets.RECEIVE_SNDHWM, True, 100),
    # heartbeats far apart: a peer whose pipe is full reads no PING either, and a loaded
    # machine filling 200 000 deliveries outlasted a 1 s heartbeat (EHOSTUNREACH)
    (partial(sockets.bind_consume, heartbeat_ms=600_000), sockets.CONSUME_SNDHWM, True, 100),
    (sockets.bind_send, sockets.SEND_SNDHWM, False, 100_000)])
def test_a_peer_that_connects_after_the_bind_gets_the_endpoints_high_water_mark(
        context, bind_endpoint, hwm, routed, size):
    """libzmq gives a later peer's pipe the options the socket had when it was bound:
    set after the bind, every endpoint's pipes had the default 1 000."""
    node_socket = bind_endpoint(context, "tcp://127.0.0.1:*", NO_CURVE)
    peer = context.socket(zmq.DEALER)
    try:
        peer.setsockopt(zmq.RCVHWM, 1)
        peer.setsockopt(zmq.ROUTING_ID, b"peer")
        peer.connect(sockets.bound_endpoint(node_socket))
        peer.send(b"hello")
        assert node_socket.poll(5000)
        node_socket.recv_multipart()
        frames = [b"peer", b"x" * size] if routed else [b"x" * size]
        queued = queued_until_full(node_socket, peer, frames)
    finally:
        peer.close(0)
        node_socket.close(0)
    assert queued >= hwm  # (the peer's own queue and the kernel's buffers take more)
    assert hwm > 1000 or queued < 1000  # not the default's 1 000 either
