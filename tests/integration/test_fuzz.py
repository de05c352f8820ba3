"""Random and mutated multipart messages on every socket of a running node (in this
process, on loopback ports of its own: a loop that failed fails the test at its end).

After each burst the node must still answer, and every message stored before the
fuzzing must come out intact.
"""

from __future__ import annotations

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pzq.client import Consumer, Producer, request_monitor
from pzq.protocol import frames as wire
from tests.support.harness import wait_until
from tests.support.inproc import InprocNode

pytestmark = pytest.mark.timeout(300)

frames = st.lists(st.binary(max_size=40), min_size=1, max_size=8)
LONG = b"9" * 5000  # more digits than Python's int() reads
known_words = st.sampled_from([b"", b"1", b"0", b"TOPIC:x", b"REPLICA:x", b"PING", b"STATS",
                               b"MONITOR", b"DEAD", b"PURGE ALL", b"REQUEUE x", b"PONG",
                               b"REPLICATE", b"REMOVE", b"\x00" * 8, b"CONSUME", b"ACK",
                               b"NACK", b"x", b"5", b"START:" + LONG, b"PROTOCOL:" + LONG,
                               b"DELAY:" + LONG, b"BATCH:" + LONG, LONG, "²".encode(),
                               b"DECLARE:1", b"CONFIRM:1"])
mixed_frames = st.lists(st.one_of(st.binary(max_size=40), known_words), min_size=1, max_size=8)
REFERENCE = [b"reference %d" % i + bytes(range(256)) for i in range(20)]


@pytest.fixture(scope="module")
def fuzzed_node(tmp_path_factory):
    endpoint = f"ipc://{tmp_path_factory.mktemp('cluster')}/fuzz.cluster"
    context = zmq.Context()
    node = InprocNode(context, tmp_path_factory.mktemp("fuzz") / "db", "--broadcast-dsn",
                      endpoint, "--nodes", "ipc:///nonexistent/peer", "--timeout-nodes",
                      "300000", "--max-message-size", "4096", "--ack-timeout", "1000000",
                      "--reaper-frequency", "200000", consume=True, tcp=True).start()
    node.cluster_dsn = endpoint
    with Producer(node.receive_dsn, context=context) as producer:
        for body in REFERENCE:
            assert producer.produce([body, b"second part"]).ok
    sockets = {name: context.socket(kind) for name, kind in (
        ("receive", zmq.DEALER), ("send", zmq.ROUTER), ("monitor", zmq.DEALER),
        ("cluster", zmq.DEALER), ("consume", zmq.DEALER))}
    for name, socket in sockets.items():
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(node.cluster_dsn if name == "cluster" else node.dsn(name))
    node.fuzz_sockets = sockets
    # A consumer ROUTER can only reach the node's DEALER by its identity: learn it
    # from one delivery (left unacked: it is delivered again later).
    assert sockets["send"].poll(10000)
    node.peer_id = sockets["send"].recv_multipart()[0]
    yield node
    for socket in sockets.values():
        socket.close()
    node.stop()
    context.destroy(linger=0)


def send_and_check(node, name: str, message: list[bytes]) -> None:
    socket = node.fuzz_sockets[name]
    if name == "send":  # a consumer ROUTER reaches the node's DEALER by its identity
        message = [node.peer_id, *message]
    try:
        socket.send_multipart(message, zmq.NOBLOCK)
    except zmq.ZMQError:
        return  # the fuzzing socket itself refused it (e.g. ROUTER with an unknown peer)
    while socket.poll(0):
        socket.recv_multipart()  # answers and deliveries are not the point here
    assert request_monitor(node.monitor_dsn, "PING", timeout=10) == b"PONG"


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(["receive", "send", "monitor", "cluster", "consume"]),
       message=mixed_frames)
def test_random_frames_never_break_the_node(fuzzed_node, target, message):
    send_and_check(fuzzed_node, target, message)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_producer_messages_get_one_answer_each(fuzzed_node, data):
    valid = wire.encode_produce(b"fuzz-id", [b"body"], (b"TOPIC:t",))
    mutated = list(valid)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(mutated)))
        action = data.draw(st.sampled_from(["drop", "insert", "flip"]))
        if action == "drop" and len(mutated) > 1:
            mutated.pop(min(position, len(mutated) - 1))
        elif action == "insert":
            mutated.insert(position, data.draw(st.one_of(st.binary(max_size=20), known_words)))
        elif mutated:
            index = min(position, len(mutated) - 1)
            mutated[index] = data.draw(st.binary(max_size=20))
    socket = fuzzed_node.fuzz_sockets["receive"]
    while socket.poll(0):
        socket.recv_multipart()
    socket.send_multipart(mutated)
    assert socket.poll(10000), f"no ACK for {mutated!r}"
    ack = wire.decode_producer_ack(socket.recv_multipart())
    assert ack.msg_id == mutated[0]
    assert ack.ok or ack.status_message  # a refusal always says why


def test_reference_messages_come_out_intact_after_fuzzing(fuzzed_node):
    # Runs after the fuzzing tests in this module (pytest keeps file order).
    context = zmq.Context()
    found = {}
    with Consumer(fuzzed_node.send_dsn, context=context) as consumer:
        def all_found() -> bool:
            message = consumer.receive(0.1)
            if message is not None:
                if message.parts[0] in REFERENCE:
                    found[message.parts[0]] = message.parts
                message.ack()
            return len(found) == len(REFERENCE)
        wait_until(all_found, 60, interval=0, message="every reference message")
    context.destroy(linger=0)
    assert all(parts == (body, b"second part") for body, parts in found.items())
