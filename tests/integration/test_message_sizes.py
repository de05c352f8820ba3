"""Every endpoint a client writes to has a size limit: a message over it that the node
can read is answered with why and logged (rate-limited); a frame over the socket's cap
is never read (ZeroMQ closes the sender's connection, before the node holds it). Each
endpoint is tried just under, at and just over its limits, and with a huge frame, and
still serves afterwards.

The nodes run in this process (tests.support.inproc) on loopback ports of their own,
but the one pzq-produce and the asyncio producer are tried on: a daemon."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from pzq import aio
from pzq.client import Producer, request_monitor
from pzq.protocol import zper as zp
from pzq.protocol.frames import MONITOR_REQUEST_MAX
from pzq.protocol.produce_batches import BATCH_BYTES, FRAME_ROOM
from pzq.sockets import MONITOR_FRAME_MAX
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(120)

BODY_MAX = 1000  # --max-message-size of these nodes
FRAME_MAX = BODY_MAX + FRAME_ROOM  # their --max-frame-size: the least it may be
HUGE = 64 << 20  # a frame far over every cap


@pytest.fixture
def node(start_inproc_node, tmp_path):
    started = start_inproc_node("--max-message-size", str(BODY_MAX),
                                "--max-frame-size", str(FRAME_MAX),
                                "--broadcast-dsn", "tcp://127.0.0.1:*",
                                "--archive-dir", str(tmp_path / "archive"),
                                "--zper-writer-dsn", "tcp://127.0.0.1:*",
                                consume=False, tcp=True)
    ready = started.event("node_ready")
    started.cluster_dsn, started.zper_writer_dsn = ready["cluster"], ready["zper_writer"]
    return started


@pytest.fixture
def connected(open_socket):
    """connected(kind, dsn, identity=None): a socket connected to ``dsn`` and a monitor
    of its disconnections (both closed when the test ends)."""
    monitors = []

    def connect(kind: int, dsn: str, identity: bytes | None = None):
        socket = open_socket(kind)
        if identity is not None:
            socket.setsockopt(zmq.IDENTITY, identity)
        monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        monitors.append(monitor)
        socket.connect(dsn)
        return socket, monitor

    yield connect
    for monitor in monitors:
        monitor.close(0)


def assert_dropped(socket, monitor) -> None:
    """ZeroMQ at the node closed the connection (the peer reconnects by itself), and
    answered nothing."""
    assert monitor.poll(10_000), "the node kept the connection of a frame over its cap"
    assert not socket.poll(0), "a frame over the cap was answered"


def answer(socket) -> list[bytes]:
    assert socket.poll(10_000), "no answer"
    return socket.recv_multipart()


def too_large_logged(node, endpoint: str) -> list[dict]:
    return [event for event in list(node.events) if event.get("event") == "message_too_large"
            and event.get("endpoint") == endpoint]


# -- --receive-dsn -----------------------------------------------------------------


@pytest.mark.parametrize("size, ack", [
    (BODY_MAX - 1, [b"1", b""]),
    (BODY_MAX, [b"1", b""]),
    (BODY_MAX + 1, [b"0", b"", b"message body of 1001 bytes exceeds the limit of 1000 bytes"]),
    (FRAME_MAX, [b"0", b"", b"message body of %d bytes exceeds the limit of 1000 bytes"
                 % FRAME_MAX]),
], ids=["under", "at", "over", "at-the-frame-cap"])
def test_a_body_the_node_can_read_is_stored_or_refused_with_why(node, connected, size, ack):
    dealer, _ = connected(zmq.DEALER, node.receive_dsn)
    dealer.send_multipart([b"m", b"", b"x" * size])
    assert answer(dealer) == [b"m", *ack]  # (the original's layout: its PHP client reads [3])
    assert node.figures()["messages"] == (1 if ack[0] == b"1" else 0)


@pytest.mark.parametrize("size", [FRAME_MAX + 1, HUGE], ids=["over-the-frame-cap", "huge"])
def test_a_frame_over_the_cap_closes_the_producers_connection_and_the_node_goes_on(
        node, connected, context, size):
    dealer, monitor = connected(zmq.DEALER, node.receive_dsn)
    dealer.send_multipart([b"big", b"", zmq.Frame(b"x" * size)], copy=False)
    assert_dropped(dealer, monitor)
    assert node.figures()["rejected"] == 0  # never read, so neither stored nor refused
    with Producer(node.receive_dsn, context=context) as other:
        assert other.produce([b"another producer"]).ok
    dealer.send_multipart([b"after", b"", b"the same producer, connected again"])
    assert answer(dealer) == [b"after", b"1", b""]
    assert node.figures()["messages"] == 2


def test_refusals_of_a_size_are_logged_once_then_counted(node, connected):
    dealer, _ = connected(zmq.DEALER, node.receive_dsn)
    for number in range(5):
        dealer.send_multipart([b"%d" % number, b"", b"x" * (BODY_MAX + 1)])
        assert answer(dealer)[1] == b"0"
    assert node.figures()["rejected"] == 5
    logged = too_large_logged(node, "receive")
    assert len(logged) == 1, logged
    assert logged[0]["reason"] == "message body of 1001 bytes exceeds the limit of 1000 bytes"
    assert logged[0]["refused_since_last_logged"] == 0


def test_a_producers_batches_fit_the_frame_cap(start_inproc_node, context):
    """A batch goes once it holds BATCH_BYTES: 100 messages of 50 kB in one batch
    (5 MB) were a frame over this node's cap, and nothing was ever answered."""
    body_max = 100_000
    node = start_inproc_node("--max-message-size", str(body_max), "--max-frame-size",
                             str(body_max + FRAME_ROOM), consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context, window=400, batch=100,
                  ack_timeout=20) as producer:
        assert producer.produce([b"first"]).ok  # (its ACK says the node takes batches)
        for _ in range(300):
            producer.send([b"x" * 50_000])
        acks = producer.flush(60)
    assert len(acks) == 300 and all(ack.ok for ack in acks)
    assert BATCH_BYTES < 100 * 50_000  # (what the test needs of the constant)


def test_the_frame_cap_must_leave_room_for_a_body_over_the_limit(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pzq", "--database", str(tmp_path / "db"),
                             "--max-message-size", "1000", "--max-frame-size", "4096"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr == (f"pzq: error: --max-frame-size must be at least {FRAME_MAX} "
                             f"bytes: --max-message-size (1000 bytes) and {FRAME_ROOM} bytes "
                             "of room for a produce batch, ids and headers\n")


# -- --monitor-dsn -----------------------------------------------------------------


def ping_of(size: int) -> bytes:
    return b"PING " + b"x" * (size - 5)


@pytest.mark.parametrize("size", [MONITOR_REQUEST_MAX - 1, MONITOR_REQUEST_MAX],
                         ids=["under", "at"])
def test_a_monitor_request_within_the_limit_is_read(node, connected, size):
    dealer, _ = connected(zmq.DEALER, node.monitor_dsn)
    dealer.send_multipart([b"", ping_of(size)])
    reply = answer(dealer)[-1]
    assert reply.startswith(b"ERROR: PING ")
    assert reply.endswith(b"give PING alone, no words after it")


def test_a_monitor_request_over_the_limit_is_answered_error(node, connected):
    dealer, _ = connected(zmq.DEALER, node.monitor_dsn)
    for size in (MONITOR_REQUEST_MAX + 1, MONITOR_FRAME_MAX):
        dealer.send_multipart([b"", ping_of(size)])
        assert answer(dealer) == [b"", b"ERROR: monitor request of %d bytes exceeds the "
                                  b"limit of %d bytes" % (size, MONITOR_REQUEST_MAX)]
    logged = too_large_logged(node, "monitor")
    assert len(logged) == 1 and logged[0]["refused_since_last_logged"] == 0


@pytest.mark.parametrize("size", [MONITOR_FRAME_MAX + 1, HUGE], ids=["over-the-frame-cap", "huge"])
def test_a_monitor_frame_over_the_cap_is_never_read(node, connected, size):
    asked = node.figures()["monitor_requests"]
    request, monitor = connected(zmq.REQ, node.monitor_dsn)
    request.send(zmq.Frame(ping_of(size)), copy=False)
    assert_dropped(request, monitor)
    assert request_monitor(node.monitor_dsn, "PING", timeout=10) == b"PONG"
    assert node.figures()["monitor_requests"] == asked + 2  # the PING and the figures


def test_the_monitor_client_refuses_a_request_the_node_would(node):
    asked = node.figures()["monitor_requests"]
    command = "PING " + "x" * MONITOR_REQUEST_MAX
    assert request_monitor(node.monitor_dsn, command, timeout=10) == (
        b"ERROR: monitor request of %d bytes exceeds the limit of %d bytes"
        % (len(command), MONITOR_REQUEST_MAX))
    assert node.figures()["monitor_requests"] == asked + 1  # (this one): nothing sent


# -- the cluster's endpoint (--broadcast-dsn) --------------------------------------


@pytest.mark.parametrize("size", [FRAME_MAX - 1, FRAME_MAX], ids=["under", "at"])
def test_a_cluster_frame_within_the_cap_is_read(node, connected, size):
    dealer, _ = connected(zmq.DEALER, node.cluster_dsn)
    dealer.send(b"x" * size)  # no cluster frame: read, refused and counted
    node.wait_figures(lambda figures: figures["cluster_rejected"] == 1,
                      message="the frame read and refused")


@pytest.mark.parametrize("size", [FRAME_MAX + 1, HUGE], ids=["over-the-frame-cap", "huge"])
def test_a_cluster_frame_over_the_cap_is_never_read(node, connected, context, size):
    dealer, monitor = connected(zmq.DEALER, node.cluster_dsn)
    dealer.send(zmq.Frame(b"x" * size), copy=False)
    assert_dropped(dealer, monitor)
    dealer.send(b"small")  # the same peer, connected again
    node.wait_figures(lambda figures: figures["cluster_rejected"] == 1,
                      message="the next frame read")
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"still serving"]).ok


# -- the ZPER writer (--zper-writer-dsn) -------------------------------------------


def zper_writer(connected, node):
    return connected(zmq.DEALER, node.zper_writer_dsn,
                     zp.make_identity("audit", 2))  # mode 2: every write answered


@pytest.mark.parametrize("size", [FRAME_MAX - 1, FRAME_MAX], ids=["under", "at"])
def test_a_zper_write_within_the_cap_is_stored(node, connected, size):
    writer, _ = zper_writer(connected, node)
    writer.send_multipart([b"w1", b"x" * size])
    assert answer(writer) == [b"w1"]


@pytest.mark.parametrize("size", [FRAME_MAX + 1, HUGE], ids=["over-the-frame-cap", "huge"])
def test_a_zper_write_over_the_cap_is_never_read(node, connected, size):
    writer, monitor = zper_writer(connected, node)
    writer.send_multipart([b"big", zmq.Frame(b"x" * size)], copy=False)
    assert_dropped(writer, monitor)
    writer.send_multipart([b"w2", b"the same writer, connected again"])
    assert answer(writer) == [b"w2"]
    assert node.stats()["archive"]["topics"]["audit"]["bytes"] < 1000  # the small one alone


# -- what the clients show ---------------------------------------------------------


@pytest.fixture
def daemon(start_node):
    return start_node("--max-message-size", str(BODY_MAX))


def test_pzq_produce_says_why_in_one_line(daemon):
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pzq-produce"), "--dsn", daemon.receive_dsn],
        input="y" * BODY_MAX + "\n" + "x" * (BODY_MAX + 1) + "\n", capture_output=True,
        text=True, timeout=60)
    lines = sorted(result.stdout.splitlines())  # by message id: their ACKs in any order
    assert result.returncode == 1 and result.stderr == "", result
    assert len(lines) == 2 and lines[0].endswith("-0 ok"), result
    assert lines[1].endswith(" failed message body of 1001 bytes exceeds the limit of "
                             "1000 bytes"), result


def test_the_asyncio_producer_says_why(daemon):
    async def produce() -> list:
        async with aio.Producer(daemon.receive_dsn) as producer:
            futures = [await producer.publish([b"x" * size])
                       for size in (BODY_MAX, BODY_MAX + 1)]
            await producer.flush(15)
        return [future.result() for future in futures]

    stored, refused = asyncio.run(produce())
    assert stored.ok and not refused.ok
    assert refused.status_message == b"message body of 1001 bytes exceeds the limit of 1000 bytes"
    wait_until(lambda: len(too_large_logged(daemon, "receive")) == 1, 10,
               message="message_too_large logged")
