"""Protocol 2 of the consume endpoint: BATCH deliveries and many keys in one ACK frame,
agreed with CONSUME's PROTOCOL option, beside protocol 1 for consumers that do not ask
(on nodes in this process, on loopback ports of their own)."""

from __future__ import annotations

import threading

import pytest
import zmq

from pzq.client import GroupConsumer, Producer
from pzq.errors import DecodeError
from pzq.protocol import consume as wire
from pzq.protocol.frame_groups import group_chunks
from tests.support.harness import wait_until
from tests.support.inproc import AnyNode, InprocNode

pytestmark = pytest.mark.timeout(60)

FAST = ("--ack-timeout", "30s", "--reaper-frequency", "100ms", "--consume-heartbeat", "1s")


def group(frames: tuple[bytes, ...]) -> bytes:
    """Frames as a batch entry carries them (a count, then each after its length)."""
    return b"".join(group_chunks(frames))


@pytest.fixture
def group_node(start_inproc_node) -> InprocNode:
    return start_inproc_node(*FAST, tcp=True)


def produce(node: AnyNode, context: zmq.Context, messages: list[list[bytes]],
            topic: str = "orders") -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for parts in messages:
            producer.send(parts, topic=topic)
        assert all(ack.ok for ack in producer.flush(15))


def raw_consumer(node: AnyNode, context: zmq.Context, *options: bytes,
                 window: int = 100) -> tuple[zmq.Socket, list[bytes]]:
    """A consumer's DEALER that sent CONSUME, and the node's answer."""
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(node.consume_dsn)
    socket.send_multipart([wire.CONSUME, b"orders", b"g1", b"%d" % window, b"DECLARE:1",
                           *options])
    return socket, receive(socket)


def receive(socket: zmq.Socket, timeout_ms: int = 10_000) -> list[bytes]:
    assert socket.poll(timeout_ms, zmq.POLLIN), "nothing from the node in time"
    return socket.recv_multipart()


def pending(node: AnyNode) -> int:
    return node.stats()["topics"]["orders"]["groups"]["g1"]["backlog"]


def received_deliveries(socket: zmq.Socket, count: int) -> list[wire.NodeMessage]:
    """What the node sent until ``count`` deliveries came, decoded."""
    found: list[wire.NodeMessage] = []
    while sum(len(message.entries) or 1 for message in found) < count:
        message = wire.decode_node_message(receive(socket))
        if message.verb in (wire.BATCH, wire.DELIVER):
            found.append(message)
    return found


def test_a_consumer_that_does_not_ask_gets_one_deliver_per_message(group_node, context):
    socket, consuming = raw_consumer(group_node, context)
    try:
        produce(group_node, context, [[b"m%d" % n] for n in range(5)])
        assert consuming[0] == wire.CONSUMING and len(consuming) == 5  # as before
        deliveries = [receive(socket) for _ in range(5)]
        assert [frames[0] for frames in deliveries] == [wire.DELIVER] * 5
        assert [frames[7] for frames in deliveries] == [b"m%d" % n for n in range(5)]
        for frames in deliveries:  # one key a frame, as protocol 1 always did
            socket.send_multipart([wire.ACK, frames[3]])
        wait_until(lambda: pending(group_node) == 0, 10)
    finally:
        socket.close()


def test_protocol_2_sends_what_the_credits_allow_in_one_batch(group_node, context):
    messages = [[b"m%d" % n] for n in range(30)] + [[b"two", b"parts"], [b""]]
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders g1"):
        assert not group_node.ask(command).startswith("ERROR")
    produce(group_node, context, messages)  # all stored before the consumer comes
    socket, answer = raw_consumer(group_node, context, b"PROTOCOL:2", window=20)
    try:
        consuming = wire.decode_node_message(answer)
        assert consuming.verb == wire.CONSUMING and consuming.protocol == 2
        first = wire.decode_node_message(receive(socket))
        assert first.verb == wire.BATCH and len(first.entries) == 20  # every credit at once
        assert [parts for _, _, parts in first.entries] == [tuple(m) for m in messages[:20]]
        assert first.ack_timeout_us == 30_000_000 and first.sent_us > 0
        keys = [key for key, _, _ in first.entries]
        socket.send_multipart([wire.ACK, b" ".join(keys)])  # all of them in one frame
        rest = received_deliveries(socket, 12)
        assert all(message.verb == wire.BATCH for message in rest)
        entries = [entry for message in rest for entry in message.entries]
        assert [parts for _, _, parts in entries] == [tuple(m) for m in messages[20:]]
        socket.send_multipart([wire.ACK, *(key for key, _, _ in entries)])  # or one each
        wait_until(lambda: pending(group_node) == 0, 10)
    finally:
        socket.close()


def test_batches_carry_headers_with_delivery_headers(start_inproc_node, context):
    node = start_inproc_node(*FAST, "--delivery-headers", tcp=True)
    consumer = GroupConsumer(node.consume_dsn, "orders", "g1", window=10, declare=True,
                             context=context)
    try:
        produce(node, context, [[b"a"], [b"b"]])
        got = consumer.receive_many(2, timeout=10)
        while len(got) < 2:
            got += consumer.receive_many(2 - len(got), timeout=10)
        assert consumer.protocol == 2
        assert [message.parts for message in got] == [(b"a",), (b"b",)]
        assert [message.deliveries for message in got] == [1, 1]
        assert all(message.headers["TOPIC"] == "orders" for message in got)
        consumer.ack_many(got)
        wait_until(lambda: node.stats()["topics"]["orders"]["groups"]["g1"]["backlog"] == 0)
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", [1, 2])
def test_group_consumer_drains_in_either_protocol(group_node, context, protocol):
    consumer = GroupConsumer(group_node.consume_dsn, "orders", "g1", window=40,
                             declare=True, context=context, protocol=protocol)
    try:
        produce(group_node, context, [[b"m%d" % n] for n in range(250)])
        assert consumer.protocol == protocol
        got: list[bytes] = []
        while len(got) < 250:
            messages = consumer.receive_many(100, timeout=10)
            assert messages, f"only {len(got)} of 250 delivered"
            assert len(messages) <= 40  # never more than the credits
            got += [message.parts[0] for message in messages]
            consumer.ack_many(messages)  # credits come back: the next batch follows
        assert got == [b"m%d" % n for n in range(250)]
        assert consumer.receive(0.3) is None  # nothing twice
        wait_until(lambda: pending(group_node) == 0, 10)
    finally:
        consumer.close()


def test_a_nack_of_many_keys_in_one_frame_gives_them_all_back(group_node, context):
    consumer = GroupConsumer(group_node.consume_dsn, "orders", "g1", window=6, declare=True,
                             context=context)
    try:
        produce(group_node, context, [[b"m%d" % n] for n in range(6)])
        first: list = []
        while len(first) < 6:
            first += consumer.receive_many(6, timeout=10)
        consumer.nack_many(first)
        again: list = []
        while len(again) < 6:
            again += consumer.receive_many(6, timeout=10)
        assert sorted(m.key for m in again) == sorted(m.key for m in first)
        consumer.ack_many(again)
        wait_until(lambda: pending(group_node) == 0, 10)
    finally:
        consumer.close()


# -- the frames, as pure functions ------------------------------------------------

def test_a_batch_decodes_to_its_entries():
    entries = [wire.batch_entry(b"k1", group((b"DELIVERY:2",)), group((b"a", b""))),
               wire.batch_entry(b"k2", group(()), group((b"b" * 300,)))]
    decoded = wire.decode_node_message([wire.BATCH, b"t", b"g", b"5", b"7",
                                        b"".join(entries)])
    assert (decoded.topic, decoded.group, decoded.sent_us, decoded.ack_timeout_us) == \
        ("t", "g", 5, 7)
    assert decoded.entries == ((b"k1", (b"DELIVERY:2",), (b"a", b"")),
                               (b"k2", (), (b"b" * 300,)))


@pytest.mark.parametrize("frames", [
    [wire.BATCH, b"t", b"g", b"5", b"7"],
    [wire.BATCH, b"t", b"g", b"x", b"7", b""],
    [wire.BATCH, b"t", b"g", b"5", b"7", b"\x02k1\x00\x00"],
    [wire.BATCH, b"t", b"g", b"5", b"7", wire.batch_entry(b"k", group(()),
                                                           group((b"a",)))[:-1]],
])
def test_a_malformed_batch_is_a_decode_error(frames):
    with pytest.raises(DecodeError):
        wire.decode_node_message(frames)


def test_key_frames_may_hold_several_keys():
    assert wire.ack_keys([wire.ACK, b"a b", b"c"]) == [b"a", b"b", b"c"]
    assert wire.decode_request([wire.NACK, b"DELAY:5", b"a b"]).keys == (b"a", b"b")
    assert wire.encode_keys(wire.ACK, [b"a", b"b"], protocol=2) == [wire.ACK, b"a b"]
    assert wire.encode_keys(wire.ACK, [b"a", b"b"]) == [wire.ACK, b"a", b"b"]
    too_many = b" ".join([b"k"] * (wire.MAX_KEYS + 1))
    assert wire.ack_keys([wire.ACK, too_many]) is None
    with pytest.raises(DecodeError):
        wire.decode_request([wire.ACK, too_many])


def test_consume_options_say_the_protocol():
    subscribe = wire.decode_request([wire.CONSUME, b"t", b"g", b"10", b"PROTOCOL:9"]).subscribe
    assert subscribe is not None and subscribe.protocol == wire.LATEST_PROTOCOL
    assert b"PROTOCOL:2" in wire.encode_consume(wire.Subscribe("t", "g", 10, protocol=2))
    assert not any(frame.startswith(b"PROTOCOL") for frame in
                   wire.encode_consume(wire.Subscribe("t", "g", 10)))
    with pytest.raises(DecodeError):
        wire.decode_request([wire.CONSUME, b"t", b"g", b"10", b"PROTOCOL:x"])


# -- a new client and a node from before protocol 2 -------------------------------

class NodeBeforeBatches:
    """A ROUTER answering as a node from before protocol 2 does (its own thread): a
    CONSUME with an option it does not know is refused; one without it is answered
    CONSUMING and gets one DELIVER."""

    def __init__(self, context: zmq.Context) -> None:
        self.context = context
        self.seen: list[list[bytes]] = []
        self.port = 0
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _serve(self) -> None:
        socket = self.context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        self.port = socket.bind_to_random_port("tcp://127.0.0.1")
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not socket.poll(50, zmq.POLLIN):
                    continue
                routing_id, *frames = socket.recv_multipart()
                self.seen.append(frames)
                if frames[0] != wire.CONSUME:
                    continue
                if any(frame.startswith(wire.PROTOCOL) for frame in frames):
                    socket.send_multipart([routing_id, wire.ERROR, b"CONSUME option "
                                           b"b'PROTOCOL:2' is not FILTER:value, ..."])
                    continue
                socket.send_multipart([routing_id, wire.CONSUMING, *frames[1:4], b"1000"])
                socket.send_multipart([routing_id, wire.DELIVER, *frames[1:3], b"k1", b"1",
                                       b"2", b"", b"body"])
        finally:
            socket.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_new_consumer_speaks_protocol_1_with_a_node_from_before(context):
    node = NodeBeforeBatches(context)
    try:
        consumer = GroupConsumer(f"tcp://127.0.0.1:{node.port}", "orders", "g1", window=5,
                                 context=context)
        try:
            assert consumer.protocol == 1
            message = consumer.receive(10)
            assert message is not None and message.parts == (b"body",)
            consumer.ack_many([message])
            wait_until(lambda: [wire.ACK, b"k1"] in node.seen, 10)  # one key a frame
        finally:
            consumer.close()
    finally:
        node.close()
