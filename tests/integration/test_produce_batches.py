"""Produce protocol 2 on --receive-dsn: a Producer asks with its first message, then
sends batches answered by one ACK each; producers that do not ask see the original
frames (on nodes in this process, on loopback ports of their own)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import zmq

from pzq.client import GroupConsumer, Producer
from pzq.errors import DecodeError, ProduceRefused
from pzq.protocol import frames
from pzq.protocol import produce_batches as batches
from tests.support.inproc import AnyNode, InprocNode

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def node(start_inproc_node) -> InprocNode:
    return start_inproc_node("--ack-timeout", "30s", "--delivery-headers",
                             "--max-message-size", "1000", tcp=True)


@pytest.fixture
def socket(node: AnyNode, context: zmq.Context) -> Iterator[zmq.Socket]:
    """A producer's DEALER of one's own, speaking frames."""
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(node.receive_dsn)
    yield dealer
    dealer.close()


def receive(socket: zmq.Socket, timeout_ms: int = 10_000) -> list[bytes]:
    assert socket.poll(timeout_ms, zmq.POLLIN), "no ACK in time"
    return socket.recv_multipart()


def consume(node: AnyNode, context: zmq.Context, count: int) -> list:
    consumer = GroupConsumer(node.consume_dsn, "orders", "g1", window=1000, context=context)
    try:
        got: list = []
        while len(got) < count:
            messages = consumer.receive_many(count - len(got), timeout=10)
            assert messages, f"only {len(got)} of {count} delivered"
            got += messages
        consumer.ack_many(got)
        assert consumer.receive(0.2) is None  # nothing more was stored
        return got
    finally:
        consumer.close()


def declare(node: AnyNode) -> None:
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders g1"):
        assert not node.ask(command).startswith("ERROR")


def test_a_producer_learns_the_protocol_and_sends_batches(node, context):
    declare(node)
    with Producer(node.receive_dsn, window=40, context=context) as producer:
        assert producer.batch == 10
        ids = [producer.send([b"m%d" % n, b"second part"], topic="orders", tag="t")
               for n in range(300)]
        acks = producer.flush(15)
        assert producer.protocol == 2
    assert [ack.msg_id for ack in acks] == ids and all(ack.ok for ack in acks)
    got = consume(node, context, 300)
    assert [message.parts for message in got] == [(b"m%d" % n, b"second part")
                                                  for n in range(300)]
    # the question is not stored: the producer's own headers are
    assert all(set(message.headers) == {"DELIVERY", "TOPIC", "TAG"} for message in got)


def test_a_producer_that_does_not_ask_sees_the_original_frames(node, context, socket):
    socket.send_multipart([b"id-1", b"TOPIC:orders", b"", b"body"])
    assert receive(socket) == [b"id-1", b"1", b""]
    with Producer(node.receive_dsn, window=40, batch=1, context=context) as producer:
        producer.send([b"alone"], topic="orders")
        assert all(ack.ok for ack in producer.flush(10)) and producer.protocol == 1


def test_the_question_is_answered_in_a_header_frame(node, context, socket):
    socket.send_multipart([b"id-1", b"TOPIC:orders", batches.PROTOCOL_HEADER, b"", b"x"])
    answer = receive(socket)
    assert answer == [b"id-1", b"1", batches.PROTOCOL_HEADER, b""]
    assert frames.decode_producer_ack(answer).ok  # a client that does not know it: ignored


def test_a_batch_is_answered_message_by_message(node, context, socket):
    declare(node)
    entries = [batches.encode_entry(b"a", [b"TOPIC:orders"], [b"first"]),
               batches.encode_entry(b"b", [b"REPLICA:x"], [b"reserved header"]),
               batches.encode_entry(b"c", [b"TOPIC:orders"], [b"x" * 2000]),
               batches.encode_entry(b"d", [b"TOPIC:orders", b"DEDUP-ID:1"], [b"once"]),
               batches.encode_entry(b"e", [b"TOPIC:orders", b"DEDUP-ID:1"], [b"again"])]
    socket.send_multipart(batches.encode_batch(b"batch-1", entries))
    answer = batches.decode_batch_ack(receive(socket))
    assert answer.batch_id == b"batch-1"
    assert [ok for ok, _ in answer.results] == [True, False, False, True, True]
    assert b"reserved" in answer.results[1][1] and b"exceeds" in answer.results[2][1]
    assert answer.results[4][1] == frames.DUPLICATE
    assert [message.parts for message in consume(node, context, 2)] == [(b"first",),
                                                                        (b"once",)]


def test_a_batch_of_several_topics_and_tags_is_counted_per_topic_and_group(node, socket):
    """Members of one topic and tag in a row are logged and counted together: each
    topic, each group (a filter's too) counts exactly its own."""
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders all",
                    "DECLARE GROUP orders eu filter=eu", "DECLARE TOPIC audit",
                    "DECLARE GROUP audit all"):
        assert not node.ask(command).startswith("ERROR")
    members = [([b"TOPIC:orders", b"TAG:eu"], b"1"), ([b"TOPIC:orders", b"TAG:eu"], b"2"),
               ([b"TOPIC:audit"], b"3"), ([b"TOPIC:orders", b"TAG:us"], b"4"),
               ([b"TOPIC:orders"], b"5"), ([b"TOPIC:orders", b"TAG:eu"], b"6"),
               ([b"TOPIC:orders", b"REPLICA:x"], b"refused")]
    socket.send_multipart(batches.encode_batch(b"mixed", [
        batches.encode_entry(b"%d" % n, headers, [body])
        for n, (headers, body) in enumerate(members)]))
    answer = batches.decode_batch_ack(receive(socket))
    assert [ok for ok, _ in answer.results] == [True] * 6 + [False]
    topics = node.stats()["topics"]
    assert (topics["orders"]["messages"], topics["audit"]["messages"]) == (5, 1)
    assert (topics["orders"]["groups"]["all"]["backlog"],
            topics["orders"]["groups"]["eu"]["backlog"],
            topics["audit"]["groups"]["all"]["backlog"]) == (5, 3, 1)


NOT_A_BATCH = b"a batch is batch id, BATCH:<1 to 10000>, an empty frame and one frame of entries"


@pytest.mark.parametrize("batch, reason", [
    ([b"batch-2", b"BATCH:3", b"", batches.encode_entry(b"a", [], [b"x"])],  # count wrong
     b"the batch's entries are not the 3 messages its BATCH header says"),
    ([b"batch-2", b"BATCH:1", b"", batches.encode_entry(b"a", [], [b"x"])[:-1]],  # cut
     b"the batch's entries are not the 1 message its BATCH header says"),
    ([b"batch-2", b"BATCH:x", b"", b""], NOT_A_BATCH),
    ([b"batch-2", b"BATCH:1", b"not empty", b""], NOT_A_BATCH),
])
def test_a_batch_that_cannot_be_read_is_refused_whole(node, context, socket, batch, reason):
    declare(node)
    socket.send_multipart(batch)
    answer = frames.decode_producer_ack(receive(socket))
    assert answer.msg_id == b"batch-2" and not answer.ok and answer.status_message == reason
    socket.send_multipart([b"id-3", b"TOPIC:orders", b"", b"after"])  # the node goes on
    assert receive(socket) == [b"id-3", b"1", b""]
    assert [message.parts for message in consume(node, context, 1)] == [(b"after",)]


# -- the frames, as pure functions ------------------------------------------------

def test_entries_decode_as_they_were_encoded():
    entries = [batches.encode_entry(b"id", [b"TOPIC:t"], [b"a", b""]),
               batches.encode_entry(b"id2", [], [b"b" * 70_000])]
    found = batches.decode_batch([b"peer", *batches.encode_batch(b"B", entries)], 100_000)
    assert [(member[0].headers, member[0].body_size, member[1]) for member in found
            if not isinstance(member, ProduceRefused)] == \
        [((b"TOPIC:t",), 1, entries[0]), ((), 70_000, entries[1])]


def test_a_batch_ack_decodes_as_it_was_encoded():
    ack = batches.encode_batch_ack(b"peer", b"B", [(True, b""), (False, b"why")])
    assert ack[2] == frames.STATUS_FAILED  # not every message was stored
    answer = batches.decode_batch_ack(ack[1:])
    assert answer == batches.BatchAck(b"B", ((True, b""), (False, b"why")))
    with pytest.raises(DecodeError):
        batches.decode_batch_ack([b"B", b"1", b"BATCH:3", b"", ack[5]])


def test_a_producer_sends_messages_alone_to_a_node_from_before(context):
    """A node from before batches stores the question as any header and ACKs as ever:
    the producer goes on sending each message alone."""
    seen: list[list[bytes]] = []
    ready, stop = threading.Event(), threading.Event()
    port: list[int] = []

    def serve() -> None:
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port.append(router.bind_to_random_port("tcp://127.0.0.1"))
        ready.set()
        try:
            while not stop.is_set():
                if router.poll(50, zmq.POLLIN):
                    routing_id, *frames = router.recv_multipart()
                    seen.append(frames)
                    router.send_multipart([routing_id, frames[0], b"1", b""])
        finally:
            router.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        with Producer(f"tcp://127.0.0.1:{port[0]}", window=40, context=context) as producer:
            for n in range(100):
                producer.send([b"m%d" % n], topic="orders")
            assert all(ack.ok for ack in producer.flush(10))
            assert producer.protocol == 1
        assert len(seen) == 100 and not any(batches.is_batch([b"", *frames])
                                            for frames in seen)
        assert batches.PROTOCOL_HEADER in seen[0] and batches.PROTOCOL_HEADER not in seen[1]
    finally:
        stop.set()
        thread.join(10)
