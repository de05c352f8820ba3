"""A message part or header that is not bytes (a str, a topic given where the sync
``send`` takes its headers) is a TypeError that names it, before anything is sent:
the producer, sync or asyncio, goes on, and every good message before and after is
ACKed and delivered whole. A socket takes a message's frames one by one, so a bad
frame after the first used to leave half a message on it, which the next message
ended: from then on no ACK came (the asyncio producer's sends timed out blaming
the node). The routing producers refuse a key neither str nor bytes in the same
words (they said "can't concat int to bytes")."""

from __future__ import annotations

import re

import pytest

from pzq import aio
from pzq.client import Consumer, Producer, RoutedProducer
from tests.support.aio import run

pytestmark = pytest.mark.timeout(60)

# (args, options, what the TypeError says), for either client
MISTAKES = [
    (([b"bad"],), {"topic": "types", "headers": ["DELAY:5"]}, "headers[0] is str 'DELAY:5'"),
    ((["bad text"],), {"topic": "types"}, "parts[0] is str 'bad text'"),
    (([b"bad", "text"],), {"topic": "types"}, "parts[1] is str 'text'"),
    ((b"bad",), {"topic": "types"}, "parts must be a list of bytes frames, got bytes"),
    (([b"bad"],), {"topic": [b"types"]}, "topic must be a str, got list"),
    (([b"bad"],), {"topic": "types", "key": 5}, "key must be a str or bytes, got int 5"),
]


def delivered(node, count: int) -> list[bytes]:
    with Consumer(node.send_dsn) as consumer:
        bodies = []
        for _ in range(count):
            message = consumer.receive(timeout=10)
            assert message is not None, f"only {bodies} delivered"
            bodies.append(b"|".join(message.parts))
            message.ack()
        assert consumer.receive(timeout=0.5) is None
    return bodies


@pytest.mark.parametrize("batch", [1, None])  # each message alone (the original's), batches
def test_the_sync_producer_refuses_a_frame_not_bytes_and_goes_on(start_node, context, batch):
    node = start_node()
    with Producer(node.receive_dsn, batch=batch, context=context) as producer:
        producer.send([b"good 0"], topic="types")  # the first asks for batches
        for args, options, says in MISTAKES:
            with pytest.raises(TypeError, match=re.escape(says)):
                producer.send(*args, **options)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="give topic and the other options by name"):
            producer.send([b"bad"], "types")  # type: ignore[arg-type]
        for n in range(1, 5):
            producer.send([b"good %d" % n], topic="types")
        acks = producer.flush(timeout=10)
    assert [ack.ok for ack in acks] == [True] * 5
    assert delivered(node, 5) == [b"good %d" % n for n in range(5)]


@pytest.mark.parametrize("batch", [1, None])
def test_the_asyncio_producer_refuses_a_frame_not_bytes_and_goes_on(start_node, aio_context,
                                                                    batch):
    node = start_node()

    async def main() -> list[bool]:
        async with aio.Producer(node.receive_dsn, batch=batch,
                                context=aio_context) as producer:
            answers = [await producer.publish([b"good 0"], topic="types")]
            for args, options, says in MISTAKES:
                with pytest.raises(TypeError, match=re.escape(says)):
                    await producer.publish(*args, **options)  # type: ignore[arg-type]
            answers += [await producer.publish([b"good %d" % n], topic="types")
                        for n in range(1, 5)]
            await producer.flush(timeout=10)
            assert producer.outstanding == 0
            return [answer.result().ok for answer in answers]
    assert run(main(), 30) == [True] * 5
    assert delivered(node, 5) == [b"good %d" % n for n in range(5)]


KEY_MISTAKES = [(5, "key must be a str or bytes, got int 5"),
                (1.5, "key must be a str or bytes, got float 1.5")]


def test_the_routing_producers_refuse_a_key_not_str_or_bytes_and_go_on(start_node, context,
                                                                        aio_context):
    node = start_node("--partitions", "types=2")
    with RoutedProducer(node.monitor_dsn, "types", context=context) as producer:
        producer.send([b"good 0"], key="k")
        for key, says in KEY_MISTAKES:
            with pytest.raises(TypeError, match=re.escape(says)):
                producer.send([b"bad"], key=key)  # type: ignore[arg-type]
        producer.send([b"good 1"], key=b"k")
        assert [ack.ok for ack in producer.flush(timeout=10)] == [True] * 2

    async def main() -> None:
        async with aio.RoutedProducer(node.monitor_dsn, "types",
                                      context=aio_context) as producer:
            assert (await producer.send([b"good 2"], key="k")).ok
            for key, says in KEY_MISTAKES:
                with pytest.raises(TypeError, match=re.escape(says)):
                    await producer.send([b"bad"], key=key)  # type: ignore[arg-type]
            assert (await producer.send([b"good 3"], key="k")).ok
    run(main(), 30)
    assert delivered(node, 4) == [b"good %d" % n for n in range(4)]
