"""Produce, deliver, ACK and give back through a real node on loopback, in this process
(tests.support.inproc, ``tcp=True``: the daemon's loop and store, its endpoints on
ports of its own, so consumers' connections are seen as a daemon sees them)."""

from __future__ import annotations

import inspect

import pytest
import zmq

from pzq import aio
from pzq.client import Consumer, Producer
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def node(inproc_node):
    return inproc_node


def consume(consumer: Consumer, count: int, ack: bool = True, timeout: float = 15.0) -> list:
    messages = []
    deadline_left = timeout
    while len(messages) < count:
        message = consumer.receive(deadline_left)
        assert message is not None, f"got {len(messages)} of {count} messages"
        if ack:
            message.ack()
        messages.append(message)
    return messages


def test_produce_consume_ack(node, producer, consumer):
    ack = producer.produce([b"hello", b"world"], headers=[b"TOPIC:greetings"])
    assert ack.ok and ack.status_message == b""
    message = consumer.receive(10)
    assert message.parts == (b"hello", b"world")
    assert message.headers == {} and message.deliveries is None  # the original's layout
    assert message.ack_timeout_us == 1_000_000
    assert message.deadline_us == message.sent_us + 1_000_000
    assert node.stats()["consumers_connected"] == 1
    message.ack()
    node.wait_figures(lambda f: f["messages"] == 0 and f["acked"] == 1, message="ack applied")
    assert node.stats()["ack_latency_ms"]["samples"] == 1
    assert node.figures()["delivered"] == 1  # and with nothing stored, nothing more comes


def test_first_delivery_is_fifo(node, producer, consumer):
    for i in range(200):
        producer.send([b"%d" % i])
    producer.flush(15)
    bodies = [int(m.parts[0]) for m in consume(consumer, 200)]
    assert bodies == list(range(200))


def test_window_of_1000_gets_exactly_one_ack_each(node, context):
    with Producer(node.receive_dsn, window=1000, context=context) as producer:
        sent = {producer.send([b"x" * 100]) for _ in range(5000)}
        acks = producer.flush(30)
    received = [ack.msg_id for ack in producer_acks(acks)]
    assert len(received) == len(sent)
    assert set(received) == sent
    figures = node.figures()
    assert figures["producer_acks_sent"] == figures["acks_ok"] == 5000
    stats = node.stats()
    assert stats["producer_acks"] == {"ok": 5000, "failed": 0, "replication_failed": 0}
    assert stats["rates"]["received_60s"] > 0


def test_a_producer_that_never_reads_its_acks_stays_the_same_size(node, context):
    """A long-lived producer kept every ACK and latency it ever got."""
    with Producer(node.receive_dsn, window=10, context=context, keep_acks=50) as producer:
        for _ in range(300):
            producer.send([b"x"])
        assert producer.flush(30)[-1].ok
        assert len(producer.latencies) == 50
        assert producer.acks_dropped == 250
        assert producer.acks() == []  # flush returned the 50 kept
        assert producer.produce([b"last"]).ok  # its own ACK, among those kept


def producer_acks(acks):
    assert all(ack.ok for ack in acks)
    return acks


def test_raw_window_of_1000_without_client_library(node, open_socket):
    """A producer written from the frame tables alone, with 1000 unanswered sends."""
    dealer = open_socket(zmq.DEALER)
    dealer.connect(node.receive_dsn)
    for i in range(1000):
        dealer.send_multipart([b"id-%d" % i, b"", b"body %d" % i])
    answers = {}
    while len(answers) < 1000:
        assert dealer.poll(15000), f"only {len(answers)} ACKs"
        msg_id, status, empty, *rest = dealer.recv_multipart()
        assert (status, empty, rest) == (b"1", b"", [])
        assert msg_id not in answers
        answers[msg_id] = status
    assert node.figures()["producer_acks_sent"] == 1000  # one each, no more

    router = open_socket(zmq.ROUTER)
    router.connect(node.send_dsn)
    seen = set()
    while len(seen) < 1000:
        assert router.poll(15000)
        peer, key, sent, timeout, empty, body = router.recv_multipart()
        assert int(sent) > 0 and int(timeout) == 1_000_000 and empty == b""
        seen.add(body)
        router.send_multipart([peer, key, b"1"])
    node.wait_figures(lambda f: f["messages"] == 0, message="all acked")


def test_many_producers_and_consumers(node, context, closing):
    producers = [closing.enter_context(Producer(node.receive_dsn, window=50, context=context))
                 for _ in range(4)]
    consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                 for _ in range(3)]
    sent = set()
    for round_ in range(250):
        for index, producer in enumerate(producers):
            sent.add(b"%d-%d" % (index, round_))
            producer.send([b"%d-%d" % (index, round_)])
    for producer in producers:
        assert all(ack.ok for ack in producer.flush(30))
    got: list[bytes] = []
    per_consumer = [0] * len(consumers)

    def drain() -> bool:
        for index, consumer in enumerate(consumers):
            while (message := consumer.receive(0)) is not None:
                got.append(message.parts[0])
                per_consumer[index] += 1
                message.ack()
        return len(got) >= len(sent)

    wait_until(drain, 30, interval=0.005, message="all messages consumed")
    assert sorted(got) == sorted(sent)
    assert sum(1 for count in per_consumer if count) >= 2, per_consumer
    node.wait_figures(lambda f: f["messages"] == 0, message="all acked")


@pytest.fixture
def counting_node(start_inproc_node):
    """A node that tells consumers how often each message was delivered."""
    return start_inproc_node("--ack-timeout", "1000000", "--reaper-frequency", "100000",
                             "--delivery-headers", consume=False, tcp=True)


def test_delivery_headers_carry_the_count_and_the_producer_headers(counting_node, context):
    with Producer(counting_node.receive_dsn, context=context) as producer, \
            Consumer(counting_node.send_dsn, context=context) as consumer:
        producer.produce([b"hello"], headers=[b"TOPIC:greetings", b"TAG:x"])
        message = consumer.receive(10)
        assert message.headers == {"DELIVERY": "1", "TOPIC": "greetings", "TAG": "x"}
        assert message.deliveries == 1 and message.parts == (b"hello",)
        message.nack()
        again = consumer.receive(10)
        assert again.key == message.key and again.deliveries == 2
        again.ack()


def test_the_sync_producer_takes_the_options_the_asyncio_one_does(counting_node, context):
    """The asyncio page: every client with the same names and options (``key=`` was
    pzq.aio's Producer's alone)."""
    def options(method) -> set[str]:
        return set(inspect.signature(method).parameters) - {"self"}
    assert options(aio.Producer.send) <= options(Producer.send)
    assert options(aio.Producer.send) - {"headers"} <= options(Producer.produce) | {"msg_id"}
    with Producer(counting_node.receive_dsn, context=context) as producer, \
            Consumer(counting_node.send_dsn, context=context) as consumer:
        producer.send([b"one"], key="customer-7", tag="eu")
        producer.produce([b"two"], key=b"customer-8")
        first, second = consumer.receive(10), consumer.receive(10)
        assert (first.headers["KEY"], first.headers["TAG"]) == ("customer-7", "eu")
        assert second.headers["KEY"] == "customer-8"
        first.ack()
        second.ack()


def test_original_consumer_reads_the_body_from_frame_five(node, producer, context):
    """The original pzq's own consumer: body = every frame from index 5 on, with
    headers set by the producer and a body that starts with an empty part."""
    producer.produce([b"", b"second part"], headers=[b"TOPIC:orders"])
    router = context.socket(zmq.ROUTER)
    router.connect(node.send_dsn)
    assert router.poll(10000)
    frames = router.recv_multipart()
    assert frames[4] == b"" and frames[5:] == [b"", b"second part"]
    router.send_multipart([frames[0], frames[1], b"1"])
    node.wait_figures(lambda f: f["messages"] == 0, message="acked")
    router.close()


def test_ack_timeout_delivers_again(counting_node, context):
    node = counting_node
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        _ack_timeout_delivers_again(node, producer, consumer)


def _ack_timeout_delivers_again(node, producer, consumer):
    producer.produce([b"slow"])
    first = consumer.receive(10)
    second = consumer.receive(10)  # not acked: comes back after about 1 s
    assert second.key == first.key and second.deliveries == 2
    second.ack()
    figures = node.wait_figures(lambda f: f["messages"] == 0, message="acked")
    assert figures["expired_messages"] >= 1 and figures["redelivered"] >= 1


def test_nack_delivers_again_before_new_messages(counting_node, context):
    node = counting_node
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        _nack_delivers_again_before_new_messages(node, producer, consumer)


def _nack_delivers_again_before_new_messages(node, producer, consumer):
    producer.produce([b"first"])
    message = consumer.receive(10)
    producer.produce([b"second"])
    second = consumer.receive(10)
    assert second.parts == (b"second",)
    message.nack()
    again = consumer.receive(10)
    assert again.key == message.key and again.deliveries == 2
    again.ack()
    second.ack()
    figures = node.wait_figures(lambda f: f["messages"] == 0, message="all acked")
    assert figures["nacked"] == 1


def test_late_ack_still_removes(node, producer, consumer):
    producer.produce([b"late"])
    message = consumer.receive(10)
    node.wait_figures(lambda f: f["expired_messages"] >= 1, message="expiry")
    message.ack()  # after its deadline, while it is ready again or re-sent
    figures = node.wait_figures(lambda f: f["messages"] == 0, message="late ack applied")
    assert figures["acked"] == 1


def test_inflight_lru_eviction_delivers_again(start_inproc_node, context):
    node = start_inproc_node("--inflight-size", "2000", "--ack-timeout", "60000000",
                             "--reaper-frequency", "100000", "--delivery-headers",
                             consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        for i in range(10):
            producer.send([b"%d" % i + b"." * 500])
        producer.flush(15)
        held = []
        # Nothing is acked yet and the ack timeout is a minute: only eviction
        # from the 2000-byte table can bring a message back.
        def redelivered() -> bool:
            message = consumer.receive(0.05)
            if message is not None:
                held.append(message)
            return message is not None and message.deliveries >= 2
        wait_until(redelivered, 20, message="an evicted message delivered again")
        figures = node.figures()
        assert figures["evicted"] >= 1 and figures["expired_messages"] == 0
        assert figures["inflight_db_size"] <= 2000 + 600
        # Everything still arrives once the consumer acks.
        bodies = set()
        def drained() -> bool:
            message = held.pop() if held else consumer.receive(0.05)
            if message is not None:
                bodies.add(message.parts[0])
                message.ack()
            return len(bodies) == 10 and node.figures()["messages"] == 0
        wait_until(drained, 20, message="all ten acked")


def test_restart_delivers_every_unacked_message(node, producer, context):
    for i in range(300):
        producer.send([b"%d" % i])
    producer.flush(15)
    with Consumer(node.send_dsn, context=context) as consumer:
        acked = {m.parts[0] for m in consume(consumer, 100)}
        consume(consumer, 50, ack=False)
    node.wait_figures(lambda f: f["acked"] == 100, message="100 acks applied")
    assert node.stop() == 0
    node.restart()
    assert node.figures()["messages"] == 200
    with Consumer(node.send_dsn, context=context) as consumer:
        rest = {m.parts[0] for m in consume(consumer, 200)}
    assert rest == {b"%d" % i for i in range(300)} - acked
    node.wait_figures(lambda f: f["messages"] == 0, message="drained")
