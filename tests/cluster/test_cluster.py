"""Clusters of real nodes on one host: replication, failure, takeover, removal."""

from __future__ import annotations

import signal
import socket
import time

import pytest
import zmq

from pzq.archive.format.files import read_topic
from pzq.client import Consumer, Producer
from pzq.protocol import cluster as cluster_wire
from tests.support.harness import NodeProcess, wait_until

pytestmark = pytest.mark.timeout(90)

TIMEOUT_NODES_US = 1_000_000
ACK_TIMEOUT_US = 1_000_000


def ipc_endpoints(tmp_path, count: int) -> list[str]:
    return [f"ipc://{tmp_path}/node{i}.cluster" for i in range(count)]


def start_cluster(start_node, endpoints: list[str], replicas: int,
                  timeout_replication_us: int = 1_000_000,
                  timeout_nodes_us: int = TIMEOUT_NODES_US) -> list[NodeProcess]:
    nodes = []
    for endpoint in endpoints:
        others = ",".join(e for e in endpoints if e != endpoint)
        nodes.append(start_node(
            "--broadcast-dsn", endpoint, "--nodes", others, "--replicas", str(replicas),
            "--timeout-nodes", str(timeout_nodes_us),
            "--timeout_replication", str(timeout_replication_us),
            "--ack-timeout", str(ACK_TIMEOUT_US), "--reaper-frequency", "100000"))
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    return nodes


def replicas_held(node: NodeProcess) -> int:
    return node.stats()["replicas_held"]


@pytest.mark.parametrize("replicas", [1, 2])
def test_ack_comes_after_the_peers_hold_the_message(start_node, context, tmp_path, replicas):
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        for i in range(20):
            ack = producer.produce([b"m%d" % i])
            assert ack.ok and not ack.replication_failed, ack
            # The ACK is only released once the copies are written: count them now.
            assert replicas_held(nodes[1]) + replicas_held(nodes[2]) == (i + 1) * replicas
    assert replicas_held(nodes[0]) == 0


def test_ack_waits_while_a_peer_is_paused(start_node, context, tmp_path):
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2,
                          timeout_replication_us=5_000_000)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        nodes[2].pause()
        try:
            producer.send([b"waits"])
            nodes[1].wait_stats(lambda s: s["replicas_held"] == 1, message="first copy")
            # One copy is not enough for --replicas 2: the ACK is still held.
            assert nodes[0].stats()["producer_acks"]["ok"] == 0
        finally:
            nodes[2].resume()
        (ack,) = producer.flush(10)
    assert ack.ok and not ack.replication_failed
    assert replicas_held(nodes[2]) == 1


def test_stop_sends_every_pending_producer_ack(start_node, context, tmp_path):
    """SIGTERM while copies are pending: each producer still gets exactly one ACK."""
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2,
                          timeout_replication_us=60_000_000)
    nodes[2].pause()
    try:
        with Producer(nodes[0].receive_dsn, window=10, context=context) as producer:
            sent = {producer.send([b"pending %d" % i]) for i in range(5)}
            nodes[1].wait_stats(lambda s: s["replicas_held"] == 5, message="first copies")
            assert nodes[0].stats()["producer_acks"]["ok"] == 0  # the second copy is missing
            assert nodes[0].stop() == 0
            acks = producer.flush(10)
    finally:
        nodes[2].resume()
    assert {ack.msg_id for ack in acks} == sent and len(acks) == 5
    assert all(ack.ok and ack.replication_failed for ack in acks)
    stopping = nodes[0].event("node_stopping")
    assert stopping["unsent_producer_acks"] == 0
    assert stopping["producer_acks_sent"] == 5  # one each, and no more


def test_stopped_peer_gives_replication_failed_at_the_deadline(start_node, context, tmp_path):
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2,
                          timeout_replication_us=800_000)
    nodes[2].pause()  # SIGSTOP: connected, silent
    try:
        with Producer(nodes[0].receive_dsn, context=context) as producer:
            started = time.monotonic()
            ack = producer.produce([b"late copy"])
            elapsed = time.monotonic() - started
        assert ack.ok and ack.replication_failed
        assert 0.75 <= elapsed < 3.0, elapsed
        assert nodes[0].stats()["replication_failures"] == 1
        with Consumer(nodes[0].send_dsn, context=context) as consumer:
            message = consumer.receive(10)
            assert message.parts == (b"late copy",)
            message.ack()
    finally:
        nodes[2].resume()


def peer_state(node: NodeProcess, endpoint: str) -> str:
    return next(peer["state"] for peer in node.stats()["peers"] if peer["endpoint"] == endpoint)


def test_a_node_stopped_by_sigterm_is_counted_down_at_once_and_up_again_when_back(
        start_node, context, tmp_path):
    """A planned stop (SIGTERM) costs the other nodes' producers nothing: the stopping
    node says LEAVING, and its peers choose other holders at once (they went on sending
    it copies for --timeout-nodes, each such ACK REPLICATION_FAILED). Its messages are
    not taken over meanwhile (takeover keeps its timer), and back, it is counted up."""
    endpoints = ipc_endpoints(tmp_path, 3)
    nodes = start_cluster(start_node, endpoints, replicas=1, timeout_replication_us=300_000,
                          timeout_nodes_us=10_000_000)
    started = time.monotonic()  # every node's start is before
    leaving = nodes[2]
    with Producer(leaving.receive_dsn, window=10, context=context) as producer:
        for i in range(10):
            producer.send([b"kept %d" % i])
        assert all(ack.ok and not ack.replication_failed for ack in producer.flush(10))
    # A start's first --timeout-nodes counts every node alive (to a takeover): past it,
    # a takeover of the leaving node's copies would start now, were it not on its timer.
    wait_until(lambda: time.monotonic() > started + 10.5, 15, message="the start's grace")

    failed_after: list[float] = []  # seconds after the SIGTERM, as the test saw them
    down_after: float | None = None
    with Producer(nodes[0].receive_dsn, window=20, context=context) as producer:
        for i in range(200):  # steady before the stop
            producer.send([b"before %d" % i])
        assert all(not ack.replication_failed for ack in producer.flush(10))
        stopped = time.monotonic()
        leaving.process.send_signal(signal.SIGTERM)
        sent, looked = 0, 0.0
        while time.monotonic() < stopped + 3.0:
            producer.send([b"during %d" % sent])
            sent += 1
            now = time.monotonic()
            failed_after += [now - stopped for ack in producer.acks() if ack.replication_failed]
            if down_after is None and now - looked > 0.05:
                looked = now
                if peer_state(nodes[0], endpoints[2]) == "left":  # not "down": it said so
                    down_after = time.monotonic() - stopped
        failed_after += [time.monotonic() - stopped for ack in producer.flush(10)
                         if ack.replication_failed]
    assert leaving.stop() == 0
    assert sent > 100, sent
    assert down_after is not None and down_after < 1.0, down_after
    assert all(after < 1.0 for after in failed_after), (len(failed_after), failed_after[-1])
    for node in nodes[:2]:
        assert node.event("peer_left")["endpoint"] == endpoints[2]
        assert [event for event in node.events if event.get("event") == "peer_left"
                and event["endpoint"] == endpoints[2]][1:] == []  # once
        assert node.event("peer_down") is None  # not again at the timeout

    leaving.restart()
    for node in nodes[:2]:
        node.wait_stats(lambda s: all(peer["state"] == "up" for peer in s["peers"]),
                        timeout=8, message="the node back counted up")
        assert node.event("takeover_started") is None  # its messages stayed its own
    with Consumer(leaving.send_dsn, context=context) as consumer:
        got = set()
        for _ in range(10):
            message = consumer.receive(10)
            assert message is not None, f"{len(got)} of 10 delivered"
            got.add(message.parts[0])
            message.ack()
    assert got == {b"kept %d" % i for i in range(10)}


def test_acked_messages_survive_the_origin_and_one_survivor_delivers_each(
        start_node, context, closing, tmp_path):
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2)
    with Producer(nodes[0].receive_dsn, window=50, context=context) as producer:
        for i in range(300):
            producer.send([b"%03d" % i])
        acks = producer.flush(30)
    assert all(ack.ok and not ack.replication_failed for ack in acks)
    # Some messages are in flight at the origin when it dies.
    with Consumer(nodes[0].send_dsn, context=context) as doomed:
        assert doomed.receive(10) is not None
    nodes[0].kill()
    killed_at = time.monotonic()

    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for node in nodes[1:]]
    delivered_by: dict[bytes, set[int]] = {}

    def all_delivered() -> bool:
        for index, consumer in enumerate(consumers):
            message = consumer.receive(0.01)
            if message is not None:
                delivered_by.setdefault(message.parts[0], set()).add(index)
                message.ack()
        return len(delivered_by) == 300

    wait_until(all_delivered, 30, interval=0, message="every ACKed message delivered")
    took = time.monotonic() - killed_at
    assert took < (TIMEOUT_NODES_US + ACK_TIMEOUT_US) / 1e6 + 5, took
    assert all(len(survivors) == 1 for survivors in delivered_by.values())
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0, message="replicas removed")

    # The origin comes back: what was acked elsewhere is not delivered again.
    nodes[0].restart()
    # With nothing stored it has nothing to deliver again.
    nodes[0].wait_figures(lambda f: f["messages"] == 0, message="tombstones applied")
    for node in nodes[1:]:
        node.wait_stats(lambda s: not s["takeovers"], message="takeover stopped")


def test_taken_over_messages_dead_letter_and_archive_under_their_origin(
        start_node, context, tmp_path):
    endpoints = ipc_endpoints(tmp_path, 2)
    nodes = []
    for index, endpoint in enumerate(endpoints):
        nodes.append(start_node(
            "--broadcast-dsn", endpoint, "--nodes", endpoints[1 - index], "--replicas", "1",
            "--timeout-nodes", str(TIMEOUT_NODES_US), "--ack-timeout", "300000",
            "--reaper-frequency", "50000", "--max-deliveries", "2",
            "--archive-dir", str(tmp_path / f"archive{index}")))
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    origin = nodes[0].stats()["node_id"]
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        assert not producer.produce([b"poison"], headers=[b"TOPIC:t"]).replication_failed
        assert not producer.produce([b"fine"], headers=[b"TOPIC:t"]).replication_failed
    nodes[0].kill()
    with Consumer(nodes[1].send_dsn, context=context) as consumer:
        received = []

        def settled() -> bool:
            message = consumer.receive(0.05)
            if message is not None:
                received.append(message)
            if message is not None and message.parts == (b"fine",):
                message.ack()
            stats = nodes[1].stats()
            return stats["dead_letters"] == 1 and stats["archive"]["archived"] == 2
        wait_until(settled, 30, message="one acked and one dead-lettered on the survivor")
        # An ACK naming a taken-over origin's key that does not exist counts once.
        bogus = f"{origin}-{10**6:016x}".encode()
        consumer.ack(received[0]._replace(key=bogus))
        nodes[1].wait_stats(lambda s: s["unknown_acks"] == 1, message="one unknown ack")
    stats = nodes[1].stats()
    assert stats["replicas_held"] == 0 and stats["unknown_acks"] == 1
    archived = wait_until(lambda: (lambda found: found if len(found) == 2 else None)(
        [m for _, m in read_topic(tmp_path / "archive1", "t")]), 10, message="archive on disk")
    assert {(m.parts, m.outcome, m.origin) for m in archived} == {
        ((b"poison",), "dead_letter", origin), ((b"fine",), "acked", origin)}
    assert all(m.key.startswith(origin.encode() + b"-") for m in archived)

    # The origin comes back: neither message is delivered again there.
    nodes[0].restart()
    nodes[0].wait_figures(lambda f: f["messages"] == 0, message="tombstones applied")
    assert nodes[0].figures()["delivered"] == 0


def test_ack_on_the_origin_removes_every_copy(start_node, context, tmp_path):
    nodes = start_cluster(start_node, ipc_endpoints(tmp_path, 3), replicas=2)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        for i in range(50):
            producer.send([b"%d" % i])
        assert all(not ack.replication_failed for ack in producer.flush(15))
    assert replicas_held(nodes[1]) == replicas_held(nodes[2]) == 50
    with Consumer(nodes[0].send_dsn, context=context) as consumer:
        for _ in range(50):
            consumer.receive(10).ack()
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0, message="copies removed")
    nodes[0].wait_figures(lambda f: f["messages"] == 0, message="acked at origin")


def test_strangers_cannot_create_or_remove_replicas(start_node, context, open_socket,
                                                   tmp_path):
    endpoints = ipc_endpoints(tmp_path, 2)
    nodes = start_cluster(start_node, endpoints, replicas=1)
    with Producer(nodes[0].receive_dsn, context=context) as producer:
        assert not producer.produce([b"real"]).replication_failed
    assert replicas_held(nodes[1]) == 1
    origin = nodes[0].stats()["node_id"].encode()

    stranger = open_socket(zmq.DEALER)
    stranger.connect(endpoints[1])
    stranger.send_multipart(cluster_wire.encode_replicate(origin, 7, b"\x00",
                                                          [(99, b"forged")]))
    stranger.send_multipart(cluster_wire.encode_remove(origin, 1, [0]))
    stranger.send_multipart(cluster_wire.encode_ping(b"0badf00d", "ipc:///not/a/member"))
    nodes[1].wait_stats(lambda s: s["cluster_rejected"] >= 3, message="strangers rejected")
    assert replicas_held(nodes[1]) == 1

    # On the producer socket cluster frames are refused (not NAME:value headers)
    # or are just a message with an odd id, never a replica...
    raw = open_socket(zmq.DEALER)
    raw.connect(nodes[1].receive_dsn)
    raw.send_multipart([b"REPLICATE", origin, b"\x00" * 8, b"\x00", b"", b"body"])
    assert raw.poll(10000)
    assert raw.recv_multipart()[:2] == [b"REPLICATE", b"0"]
    raw.send_multipart([b"REPLICATE", b"", b"body"])
    assert raw.poll(10000)
    assert raw.recv_multipart()[:2] == [b"REPLICATE", b"1"]
    # ...and a REPLICA header is refused outright.
    raw.send_multipart([b"forged", b"REPLICA:" + origin, b"", b"body"])
    assert raw.poll(10000)
    assert raw.recv_multipart()[:2] == [b"forged", b"0"]
    assert replicas_held(nodes[1]) == 1
    assert replicas_held(nodes[0]) == 1  # node 1's real message, copied to node 0


def free_port(family: int, host: str) -> int:
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def test_tcp_ipv6_cluster_on_one_host(start_node, context):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    endpoints = [f"tcp://[::1]:{free_port(socket.AF_INET6, '::1')}" for _ in range(2)]
    nodes = start_cluster(start_node, endpoints, replicas=1)
    with Producer(nodes[1].receive_dsn, context=context) as producer:
        ack = producer.produce([b"over ipv6"])
    assert ack.ok and not ack.replication_failed
    assert replicas_held(nodes[0]) == 1
