"""A group consumer's calls return by their timeout whatever its sends meet (real
daemons): a node that refuses its CURVE key once it connects again, a node that is
down, a node stopped (SIGSTOP) whose pipes fill. What could not go is kept and goes
once the node takes it; every message a producer had ACKed is delivered."""

from __future__ import annotations

import asyncio
import time

import pytest

from pzq import aio
from pzq.client import GroupConsumer
from tests.integration.test_groups import FAST, produce
from tests.support.harness import NodeProcess

pytestmark = pytest.mark.timeout(90)
COUNT = 3000  # deliveries, ACKed one by one
SOME = 300  # keys in each WORKING that fills the pipe (some 6 kB)
RETURN_WITHIN_S = 5.0  # a receive(1) or an ack returns well inside this, or it hung
FILL_WITHIN_S = 60.0  # a pipe to a node away takes 1000 messages, and the kernel's buffers


def fill_until_kept(consumer: GroupConsumer, got: list) -> None:
    """WORKING for some deliveries, again and again, until the socket takes no more and
    one waits in the consumer: each call returns meanwhile."""
    deadline = time.monotonic() + FILL_WITHIN_S
    while not consumer.unsent:
        assert time.monotonic() < deadline, "the socket still takes WORKING"
        consumer.working(*got[:SOME])


def acked(node: NodeProcess) -> int:
    return int(node.stats()["topics"]["orders"]["groups"]["g"]["acked"])


def deliver_all(consumer: GroupConsumer, count: int) -> list:
    got: list = []
    while len(got) < count:
        found = consumer.receive_many(count - len(got), 10)
        assert found, f"only {len(got)} of {count} delivered"
        got += found
    return got


def test_receive_returns_by_its_timeout_when_the_node_refuses_the_key(start_node, curve_keys,
                                                                      tmp_path, context):
    """The node restarts without the consumer's key: its DEALER's handshake is refused
    and it has no pipe to send on; receive(1) waited for one for ever."""
    node = start_node(*curve_keys["args"], *FAST, consume=True)
    node.curve = curve_keys["client"]
    with GroupConsumer(node.consume_dsn, "orders", "g", declare=True, context=context,
                       curve=curve_keys["client"]) as consumer:
        assert consumer.receive(0.2) is None
        (tmp_path / "authorized" / "client.key").unlink()
        node.stop()
        node.restart()
        for _ in range(3):  # a HEARTBEAT is due at each: none can go
            started = time.monotonic()
            assert consumer.receive(1) is None
            assert time.monotonic() - started < RETURN_WITHIN_S


@pytest.mark.parametrize("away", ["down", "stopped"])
def test_acks_return_while_the_node_is_away_and_go_when_it_is_back(start_node, context, away):
    """Answers to a node that is down, or stopped (SIGSTOP): once its pipe was full an
    answer waited for room for ever. They return; what did not go is kept and goes
    once the node is back, and every message is ACKed in the end."""
    node = start_node(*FAST, consume=True)
    bodies = [b"%d" % number for number in range(COUNT)]
    produce(node, context, bodies)
    with GroupConsumer(node.consume_dsn, "orders", "g", window=COUNT, declare=True,
                       context=context) as consumer:
        got = deliver_all(consumer, COUNT)
        node.pause() if away == "stopped" else node.stop()
        fill_until_kept(consumer, got)
        started = time.monotonic()
        for message in got:
            consumer.ack(message)
        assert consumer.unsent > COUNT  # kept, in order
        assert time.monotonic() - started < RETURN_WITHIN_S
        started = time.monotonic()
        assert consumer.receive(1) is None
        assert time.monotonic() - started < RETURN_WITHIN_S
        node.resume() if away == "stopped" else node.restart()
        seen = {message.parts[0] for message in got}
        deadline = time.monotonic() + 60
        while acked(node) < COUNT:  # what the node forgot (restarted) comes again
            assert time.monotonic() < deadline, f"{acked(node)} of {COUNT} ACKed"
            for message in consumer.receive_many(COUNT, 0.5):
                seen.add(message.parts[0])
                consumer.ack(message)
        assert seen == set(bodies)


@pytest.mark.parametrize("away", ["down", "stopped"])
def test_asyncio_acks_return_while_the_node_is_away(start_node, context, aio_context, away):
    """The asyncio consumer's answers wait in its outbox, never in a send: the same."""
    node = start_node(*FAST, consume=True)
    bodies = [b"%d" % number for number in range(COUNT)]
    produce(node, context, bodies)

    async def run() -> set[bytes]:
        async with aio.GroupConsumer(node.consume_dsn, "orders", "g", window=COUNT, declare=True,
                                     context=aio_context) as consumer:
            got = []
            while len(got) < COUNT:
                found = await consumer.receive_many(COUNT - len(got), 10)
                assert found, f"only {len(got)} of {COUNT} delivered"
                got += found
            node.pause() if away == "stopped" else node.stop()
            deadline = time.monotonic() + FILL_WITHIN_S
            while not consumer.unsent:
                assert time.monotonic() < deadline, "the socket still takes WORKING"
                await consumer.working(*got[:SOME])
            started = time.monotonic()
            for message in got:
                await consumer.ack(message)
            assert await consumer.receive(1) is None
            assert time.monotonic() - started < RETURN_WITHIN_S
            node.resume() if away == "stopped" else node.restart()
            seen = {message.parts[0] for message in got}
            deadline = time.monotonic() + 60
            while acked(node) < COUNT:
                assert time.monotonic() < deadline, f"{acked(node)} of {COUNT} ACKed"
                for message in await consumer.receive_many(COUNT, 0.5):
                    seen.add(message.parts[0])
                    await consumer.ack(message)
            return seen

    assert asyncio.run(run()) == set(bodies)


def test_ack_confirmed_raises_by_its_timeout_with_the_node_stopped(start_node, context):
    """Its ACK not taken by a stopped node's full pipe: TimeoutError by its timeout
    (the send waited for room for ever), the ACK still going once the node goes on."""
    node = start_node(*FAST, consume=True)
    produce(node, context, [b"one", b"two"])
    with GroupConsumer(node.consume_dsn, "orders", "g", declare=True, confirm=True,
                       context=context) as consumer:
        got = deliver_all(consumer, 2)
        node.pause()
        try:
            fill_until_kept(consumer, got)
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="^1 ACK not confirmed within 2 s: "):
                consumer.ack_confirmed(got[:1], timeout=2)
            assert time.monotonic() - started < 2 + RETURN_WITHIN_S  # (and the probe's)
        finally:
            node.resume()
        consumer.ack_confirmed(got[1:], timeout=30)  # after what waited: the first too
        assert acked(node) == 2


def test_asyncio_receive_returns_by_its_timeout_when_the_node_refuses_the_key(
        start_node, curve_keys, tmp_path, aio_context):
    """The asyncio consumer as the sync one: its HEARTBEAT waits in its outbox."""
    node = start_node(*curve_keys["args"], *FAST, consume=True)

    async def run() -> None:
        async with aio.GroupConsumer(node.consume_dsn, "orders", "g", declare=True,
                                     context=aio_context, curve=curve_keys["client"]) \
                as consumer:
            assert await consumer.receive(0.2) is None
            (tmp_path / "authorized" / "client.key").unlink()
            node.stop()
            node.restart()
            for _ in range(3):
                started = time.monotonic()
                assert await consumer.receive(1) is None
                assert time.monotonic() - started < RETURN_WITHIN_S

    asyncio.run(run())
