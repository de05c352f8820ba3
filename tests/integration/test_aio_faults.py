"""pzq.aio under faults, on real daemons: a node SIGKILLed and restarted under an
asyncio producer and group consumer, and CURVE, with a key the node refuses."""

from __future__ import annotations

import asyncio
import time

import pytest

from pzq import aio, curve_probe
from pzq.errors import ClientClosed
from pzq.security import ClientCurve
from tests.support.aio import eventually, run
from tests.support.harness import unread_bytes

pytestmark = pytest.mark.timeout(120)

OPTIONS = ("--ack-timeout", "30s", "--reaper-frequency", "100ms", "--consume-heartbeat", "1s")


def test_a_node_killed_and_restarted_under_async_clients_loses_no_acked_message(
        start_node, aio_context):
    node = start_node(*OPTIONS, consume=True)
    acked: set[bytes] = set()
    got: dict[bytes, int] = {}

    def on_answer(body: bytes, answer: asyncio.Future) -> None:
        if not answer.cancelled() and answer.exception() is None and answer.result().ok:
            acked.add(body)

    async def publish(producer: aio.Producer, numbers: range) -> None:
        for n in numbers:
            body = b"k%d" % n
            answer = await producer.publish([body], topic="t-kill", timeout=3)
            answer.add_done_callback(lambda future, body=body: on_answer(body, future))

    async def consume(consumer: aio.GroupConsumer) -> None:
        while True:
            messages = await consumer.receive_many(50, 0.2)
            for message in messages:
                got[message.parts[0]] = got.get(message.parts[0], 0) + 1
            await consumer.ack_many(messages)  # also while the node is down

    async def main() -> None:
        async with aio.GroupConsumer(node.consume_dsn, "t-kill", "g", window=50,
                                     declare=True, context=aio_context) as consumer:
            reading = asyncio.create_task(consume(consumer))
            first = aio.Producer(node.receive_dsn, window=50, context=aio_context)
            sending = asyncio.create_task(publish(first, range(3000)))
            await eventually(lambda: len(acked) >= 500, 30, "500 ACKs before the kill")
            await asyncio.to_thread(node.kill)  # mid-stream: ACKs, deliveries in flight
            killed_with = len(acked)
            await asyncio.to_thread(node.restart)
            # what the node took before it died is never answered: the window fills
            # and publish says so within its 3 s, long before the producer's
            # ack_timeout frees the window (the test below); this one is closed
            try:
                await sending
            except TimeoutError as exc:
                assert "full window" in str(exc)
            await first.close()
            async with aio.Producer(node.receive_dsn, window=50,
                                    context=aio_context) as second:
                await publish(second, range(3000, 3300))
                await second.flush(30)
            assert {b"k%d" % n for n in range(3000, 3300)} <= acked
            await eventually(lambda: acked <= got.keys(), 60,
                             "every ACKed message delivered (the consumer joined again)")
            await eventually(lambda: _backlog(node) == 0, 30,
                             "every delivery acked, those acked while the node was down too")
            reading.cancel()
            await asyncio.wait([reading])
            print(f"acked {len(acked)} ({killed_with} before the kill), delivered {len(got)}, "
                  f"again {sum(count - 1 for count in got.values())}")
    run(main(), 110)


@pytest.mark.parametrize("batch", [1, None])
def test_messages_a_killed_node_never_answered_are_given_up_and_free_the_window(
        start_node, aio_context, batch):
    """Messages taken by a node that is then killed are never answered (the node
    answers on the connection that brought them): after ``ack_timeout`` s each one's
    Future says so and its room in the window is free, so the same producer goes on
    with the restarted node. (Stopped, the node takes them into its socket's buffer
    and reads none: they die with it, whatever the machine's speed.) Without the
    timeout the window stayed full for good: publish timed out, flush never ended."""
    node = start_node(*OPTIONS)

    async def main() -> None:
        async with aio.Producer(node.receive_dsn, window=8, batch=batch, ack_timeout=2,
                                context=aio_context) as producer:
            assert (await producer.send([b"before"], topic="t-lost")).ok
            await asyncio.to_thread(node.pause)
            lost = [await producer.publish([b"lost %d" % n], topic="t-lost")
                    for n in range(8)]
            assert producer.outstanding == 8  # the window is full
            port = int(node.receive_dsn.rsplit(":", 1)[1])
            await eventually(lambda: unread_bytes(port) > 0, 10,
                             "messages in the stopped node's socket")
            await asyncio.to_thread(node.kill)
            await asyncio.to_thread(node.restart)
            started = time.monotonic()
            await asyncio.wait_for(asyncio.wait(lost), 15)
            waited = time.monotonic() - started
            assert waited < 10, f"given up after {waited:.1f} s"  # (2 s, and the load)
            # those in the killed node's socket are given up; any the connection had
            # not written yet, and the one of a batch that waited behind them, go to
            # the restarted node (or are given up too, when it is not up within 2 s)
            given_up = [future.exception() for future in lost if future.exception()]
            answers = [future.exception() or future.result() for future in lost]
            assert given_up and all(isinstance(exc, TimeoutError) and str(exc).startswith(
                "no ACK within 2 s of sending: the node may have stored the message or not")
                for exc in given_up), answers
            assert all(answer.ok for answer in answers if not isinstance(answer, Exception))
            assert producer.outstanding == 0
            after = [await producer.publish([b"after %d" % n], topic="t-lost", timeout=5)
                     for n in range(20)]  # more than the window: room came back
            await producer.flush(10)
            assert all(future.result().ok for future in after)
    run(main(), 60)


def _backlog(node) -> int:
    return int(node.stats()["topics"]["t-kill"]["groups"]["g"]["backlog"])


def test_curve_works_and_a_refused_key_is_a_clear_error_within_the_timeout(
        start_node, aio_context, curve_keys):
    node = start_node(*curve_keys["args"], consume=True)
    node.curve = client = curve_keys["client"]
    stranger: ClientCurve = curve_keys["stranger"]
    wrong_server = ClientCurve(client.keys, stranger.keys.public)

    async def main() -> None:
        async with aio.Producer(node.receive_dsn, curve=client, context=aio_context) as producer:
            assert (await producer.send([b"secret"], topic="t-curve")).ok
        async with aio.GroupConsumer(node.consume_dsn, "t-curve", "g", curve=client,
                                     declare=True, start="earliest",
                                     context=aio_context) as consumer:
            message = await consumer.receive(10)
            assert message is not None and message.parts == (b"secret",)
            await message.ack()
        assert await aio.request_monitor(node.monitor_dsn, "PING", curve=client) == b"PONG"
        # without keys it blamed "a busy node, not a pzq endpoint, or" CURVE
        for curve, reason in ((stranger, curve_probe.CLIENT_KEY_REFUSED),
                              (wrong_server, curve_probe.SERVER_KEY_WRONG),
                              (None, curve_probe.CURVE_REQUIRED)):
            started = time.monotonic()
            refused = aio.GroupConsumer(node.consume_dsn, "t-curve", "g", curve=curve,
                                        timeout=2, context=aio_context)
            with pytest.raises(TimeoutError, match="no answer to CONSUME within 2 s") as raised:
                await refused.join()
            assert reason in str(raised.value)
            assert time.monotonic() - started < 5
            with pytest.raises(ClientClosed):
                await refused.receive()
            with pytest.raises(TimeoutError) as raised:
                await aio.request_monitor(node.monitor_dsn, "PING", 2, curve=curve)
            assert reason in str(raised.value)
        async with aio.Producer(node.receive_dsn, curve=stranger,
                                context=aio_context) as producer:
            with pytest.raises(TimeoutError) as raised:
                await producer.send([b"never"], topic="t-curve", timeout=2)
            assert curve_probe.CLIENT_KEY_REFUSED in str(raised.value)
    run(main())


def test_a_producer_closed_before_the_acks_says_its_messages_may_be_stored(
        start_node, aio_context):
    """ClientClosed at ``close`` is no "not sent": messages a paused node holds in its
    socket are stored once it goes on. The answer says so, and what to do."""
    node = start_node(*OPTIONS)

    async def main() -> None:
        producer = aio.Producer(node.receive_dsn, window=8, context=aio_context)
        # connected and answered first: what follows goes into the node's socket (a
        # connection the paused node has not taken yet would hold no message)
        assert (await producer.send([b"first"], topic="t-closed")).ok
        await asyncio.to_thread(node.pause)
        try:
            sent = [await producer.publish([b"late %d" % n], topic="t-closed")
                    for n in range(8)]
            port = int(node.receive_dsn.rsplit(":", 1)[1])
            await eventually(lambda: unread_bytes(port) > 0, 10,
                             "messages in the paused node's socket")
            await producer.close()
        finally:
            node.resume()
        for future in sent:
            with pytest.raises(ClientClosed, match="may have stored it or not; send it "
                               "again with the same dedup_id"):
                future.result()
        figures = node.wait_stats(lambda s: s.get("topics", {}).get("t-closed", {})
                                  .get("messages", 0) > 1, message="stored after close")
        assert figures["topics"]["t-closed"]["messages"] <= 1 + 8
    run(main())


def test_a_close_cut_while_the_answers_drain_still_closes_the_consumer(
        start_node, aio_context):
    """A service's shutdown under ``asyncio.timeout`` with the node gone: ``close``
    waits up to a second for the answers to go, and a cut there closed nothing (the
    socket stayed open for good, a second ``close`` returned at once: ``Unclosed
    socket`` at collection). Now the consumer is closed whatever cuts the wait."""
    node = start_node(*OPTIONS, consume=True)

    async def main() -> None:
        async with aio.Producer(node.receive_dsn, window=500, context=aio_context) as producer:
            for n in range(1500):
                await producer.publish([b"%d" % n], topic="t-cut-close")
            await producer.flush(30)
        consumer = aio.GroupConsumer(node.consume_dsn, "t-cut-close", "g", window=1500,
                                     declare=True, context=aio_context)
        held: list[aio.Message] = []
        while len(held) < 1500:
            held += await consumer.receive_many(1500, 10)
        await asyncio.to_thread(node.kill)
        for message in held:  # more answers than the socket queues for a node gone
            await message.ack()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await consumer.close()
        assert consumer.closed and consumer.socket.closed
    run(main())


def test_a_nack_of_a_delivery_from_before_a_sigkill_leaves_the_new_one_alone(
        start_node, aio_context):
    """As for the sync consumer (tests/integration/test_groups_waits.py): the NACK of
    what came before the node was killed is not sent, so the restarted node's
    delivery of the same message keeps the delay of its own NACK."""
    node = start_node(*OPTIONS, "--delivery-headers", consume=True)

    async def main() -> None:
        async with aio.Producer(node.receive_dsn, context=aio_context) as producer:
            assert (await producer.send([b"twice"], topic="t-again")).ok
        async with aio.GroupConsumer(node.consume_dsn, "t-again", "g", window=1,
                                     declare=True, context=aio_context) as consumer:
            before = await consumer.receive(10)
            assert before is not None
            await asyncio.to_thread(node.kill)
            await asyncio.to_thread(node.restart)
            after = await consumer.receive(15)  # joined again: the same key
            assert after is not None and after.key == before.key
            await consumer.nack(before)
            await consumer.nack(after, delay=3600)
            await eventually(lambda: node.stats()["topics"]["t-again"]["groups"]["g"]
                             ["delayed"] == 1, 10, "the NACK's delay taken")
            assert await consumer.receive(2) is None, "given back at once by the old NACK"
    run(main(), 60)
