"""``ack_confirmed`` whose node does not confirm in time says why, as a join's timeout
does: what a probe finds at the endpoint (a killed node: nothing answers there). It
said only "3 ACKs not confirmed within 2 s", and "1 ACKs" of one. Either client."""

from __future__ import annotations

import pytest

from pzq import aio
from pzq.client import GroupConsumer, Producer
from tests.support.aio import run

pytestmark = pytest.mark.timeout(60)

SAYS = "1 ACK not confirmed within 1 s: nothing answers there (is the node running?)"


def delivered_then_killed(start_node, context):
    node = start_node(consume=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"one"], topic="confirmed").ok
    return node


def test_the_sync_consumer_says_why_its_acks_were_not_confirmed(start_node, context):
    node = delivered_then_killed(start_node, context)
    with GroupConsumer(node.consume_dsn, "confirmed", "g", confirm=True,
                       context=context) as consumer:
        message = consumer.receive(timeout=10)
        assert message is not None
        node.kill()
        with pytest.raises(TimeoutError) as raised:
            consumer.ack_confirmed([message], timeout=1)
    assert str(raised.value) == SAYS


def test_the_asyncio_consumer_says_why_its_acks_were_not_confirmed(start_node, context,
                                                                    aio_context):
    node = delivered_then_killed(start_node, context)

    async def main() -> str:
        async with aio.GroupConsumer(node.consume_dsn, "confirmed", "g", confirm=True,
                                     context=aio_context) as consumer:
            message = await consumer.receive(timeout=10)
            assert message is not None
            node.kill()
            with pytest.raises(TimeoutError) as raised:
                await consumer.ack_confirmed([message], timeout=1)
            return str(raised.value)
    assert run(main(), 30) == SAYS
