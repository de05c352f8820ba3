"""pzq.aio on a real node: every client and method, bad input, cancellation at any
point, and a loop that is never blocked. One daemon serves the module (each test
has topics of its own); coroutines run under asyncio.run (tests.support.aio)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator

import pytest
import zmq

from pzq import aio
from pzq.client import request_monitor
from pzq.errors import ClientClosed, ConsumeRefused, EndpointError, ReaderError
from pzq.protocol import zper as zp
from tests.support.aio import Ticker, run
from tests.support.harness import NodeProcess

pytestmark = pytest.mark.timeout(120)

OPTIONS = ("--ack-timeout", "30s", "--reaper-frequency", "100ms", "--consume-heartbeat", "1s")
STALL_MESSAGES = 20_000


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    folder = tmp_path_factory.mktemp("aio")
    started = NodeProcess(folder / "db", *OPTIONS, "--archive-dir", str(folder / "archive"),
                          "--archive-dsn", "tcp://127.0.0.1:*", "--flush-messages", "1",
                          consume=True)
    started.start()
    started.archive_dsn = started.event("node_ready")["archive"]
    yield started
    if started.running:
        started.kill()


async def produce(node: NodeProcess, context, topic: str, bodies: list[bytes],
                  tag: str | None = None) -> None:
    async with aio.Producer(node.receive_dsn, window=50, context=context) as producer:
        futures = [await producer.publish([body], topic=topic, tag=tag) for body in bodies]
        await producer.flush(15)
    assert all(future.result().ok for future in futures)


async def drain(consumer, count: int, timeout: float = 10.0) -> list[bytes]:
    """``count`` deliveries, each acked; their first parts."""
    got: list[bytes] = []
    while len(got) < count:
        messages = await consumer.receive_many(count - len(got), timeout)
        assert messages, f"only {len(got)} of {count} delivered"
        got += [message.parts[0] for message in messages]
        await consumer.ack_many(messages)
    return got


def bodies(prefix: str, count: int) -> list[bytes]:
    return [b"%s-%d" % (prefix.encode(), n) for n in range(count)]


# -- producer --------------------------------------------------------------------------


def test_publish_resolves_each_future_at_its_ack_and_send_returns_the_ack(node, aio_context):
    async def main() -> None:
        async with aio.Producer(node.receive_dsn, window=20, context=aio_context) as producer:
            futures = [await producer.publish([b"p%d" % n, b"two"], topic="t-produce",
                                              key=b"k%d" % (n % 3))
                       for n in range(300)]
            assert producer.outstanding <= 20
            await producer.flush(15)
            assert producer.outstanding == 0 and producer.protocol == 2
            acks = [future.result() for future in futures]
            assert all(ack.ok for ack in acks)
            assert len({ack.msg_id for ack in acks}) == 300
            first = await producer.send([b"d"], topic="t-produce", dedup_id="order-1")
            again = await producer.send([b"d"], topic="t-produce", dedup_id="order-1")
            assert first.ok and not first.duplicate and again.duplicate
            refused = await producer.send([b"x"], topic="no such topic!")
            assert not refused.ok and b"topic" in refused.status_message
            tagged = await producer.send([b"y"], topic="t-produce", tag="eu",
                                         headers=[b"X-TRACE:1"])
            assert tagged.ok
        async with aio.GroupConsumer(node.consume_dsn, "t-produce", "g", context=aio_context,
                                     declare=True) as consumer:
            got = await drain(consumer, 302)
        assert sorted(got) == sorted([b"p%d" % n for n in range(300)] + [b"d", b"y"])
    run(main())


def test_a_routed_publish_waits_while_the_table_knows_no_endpoint_of_the_owner(
        node, aio_context):
    """Right after a node (a shard) starts, its peers may name it owner before they
    heard where clients reach it: the publish asks the table again, as the sync
    RoutedProducer.send does, rather than raising at once."""
    request_monitor(node.monitor_dsn, "DECLARE TOPIC t-unheard partitions=4", 10)
    unheard = {"node": "this-node", "nodes": {"this-node": {"state": "self"}},
               "topics": {"t-unheard": {"partitions": 4, "owners": ["this-node"] * 4}}}

    async def main() -> None:
        table = aio.RouteTable(node.monitor_dsn)
        table.answered(node.monitor_dsn, json.dumps(unheard).encode(), time.monotonic())
        async with aio.RoutedProducer(table, "t-unheard", context=aio_context) as producer:
            ack = await producer.send([b"m"], key=b"k", timeout=10)
            assert ack.ok
            table.answered(node.monitor_dsn, json.dumps(unheard).encode(), time.monotonic())
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="its owner not heard from yet.* within"):
                await producer.send([b"m"], key=b"k", timeout=0.0)
            assert time.monotonic() - started < 1.0
    run(main())


def test_a_producer_used_from_another_event_loop_says_so_and_sends_nothing(node, aio_context):
    producer = aio.Producer(node.receive_dsn, context=aio_context)

    async def first() -> None:
        assert (await producer.send([b"first loop"], topic="t-loops")).ok

    async def second() -> None:
        with pytest.raises(RuntimeError, match="belongs to the event loop it was first used "
                                               "on, which reads its ACKs: nothing was sent"):
            await producer.send([b"second loop"], topic="t-loops")

    async def third() -> None:
        await producer.close()  # the sockets go; a closed one says so on any loop
        async with aio.GroupConsumer(node.consume_dsn, "t-loops", "g", context=aio_context,
                                     declare=True) as consumer:
            assert await drain(consumer, 1) == [b"first loop"]
            assert await consumer.receive(timeout=1.0) is None  # the second was not stored
    run(first())
    run(second())
    run(third())


def test_a_routed_send_without_its_ack_says_why_as_the_plain_one_does(node, aio_context):
    """``RoutedProducer.send`` past its timeout raised a TimeoutError with no words;
    it says, as ``Producer.send`` does, which node and what a probe finds there."""
    async def main() -> None:
        async with aio.RoutedProducer([node.monitor_dsn], "t-routed-late",
                                      context=aio_context) as producer:
            assert (await producer.send([b"first"])).ok
            await asyncio.to_thread(node.pause)
            try:
                with pytest.raises(TimeoutError, match=f"^no ACK within 1 s: "
                                   f"{node.receive_dsn}: it accepts connections"):
                    await producer.send([b"late"], timeout=1)
            finally:
                node.resume()
            await producer.flush(30)
    run(main())


def test_a_routed_producer_never_gives_up_what_its_session_sends_on(node, aio_context):
    """A routed producer's producer of one node keeps a message without its ACK (no
    ack_timeout), as the sync one's does: its session sends it again to the owner of
    the moment. Given up after 20 s there, a message sent to an owner that died failed
    the caller's Future while the session would have sent it on."""
    async def main() -> None:
        async with aio.RoutedProducer([node.monitor_dsn], "t-routed-kept",
                                      context=aio_context) as producer:
            assert (await producer.send([b"first"])).ok
            members = list(producer._producers.values())
            assert members and all(member._session.ack_timeout is None for member in members)
    run(main())


# -- group consumer --------------------------------------------------------------------


def test_a_group_consumer_receives_iterates_and_answers_every_way(node, aio_context):
    async def main() -> None:
        await produce(node, aio_context, "t-group", bodies("g", 6))
        async with aio.GroupConsumer(node.consume_dsn, "t-group", "g", window=10,
                                     context=aio_context, declare=True) as consumer:
            assert consumer.joined and consumer.protocol == 2
            first = await consumer.receive(5)
            assert first is not None and first.parts == (b"g-0",)
            await first.ack()
            second, third = await consumer.receive_many(2, 5)
            await second.nack(delay=0.3)  # comes again after its delay
            await third.working()
            await third.reject()  # to the dead letters
            seen = []
            async for message in consumer:
                seen.append(message.parts[0])
                await message.ack()
                if len(seen) == 4:
                    break
            assert sorted(seen) == [b"g-1", b"g-3", b"g-4", b"g-5"]  # g-1 again, delayed
            assert await consumer.receive(0.3) is None
            assert consumer.errors == []
        stats = node.stats()["topics"]["t-group"]["groups"]["g"]
        assert stats["backlog"] == 0
    run(main())


def test_a_delivery_another_consumer_received_is_refused_before_it_is_sent(node, aio_context):
    """Its key would answer this consumer's delivery of the same message (another
    group's) in its place: ValueError, nothing sent."""
    async def main() -> None:
        await produce(node, aio_context, "t-other", [b"o-1"])
        async with aio.GroupConsumer(node.consume_dsn, "t-other", "billing", declare=True,
                                     context=aio_context) as billing, \
                aio.GroupConsumer(node.consume_dsn, "t-other", "audit",
                                  context=aio_context) as audit:
            mine, theirs = await billing.receive(5), await audit.receive(5)
            assert mine is not None and theirs is not None and mine.key == theirs.key
            for answer in (billing.ack(theirs), billing.ack_many([mine, theirs]),
                           billing.nack(theirs, delay=1.0), billing.nack_many([theirs]),
                           billing.working(theirs), billing.reject(theirs)):
                with pytest.raises(ValueError, match="received by another consumer"):
                    await answer
            await mine.nack()  # after the refused answers: billing's own is still out
            figures = node.wait_stats(
                lambda s: s["topics"]["t-other"]["groups"]["billing"]["nacked"] == 1,
                message="billing's own delivery given back, not ACKed before")
            assert figures["topics"]["t-other"]["groups"]["billing"]["acked"] == 0
            await theirs.ack()
    run(main())


def test_a_join_cut_inside_async_with_leaves_no_socket_open(node, aio_context):
    """``asyncio.timeout`` around ``async with GroupConsumer(...)`` (or the routed one)
    that cuts its join: nobody holds the consumer to close it, so it closes itself, no
    ``Unclosed socket`` later (the test's context fails a test that leaves one)."""
    async def main() -> None:
        table = aio.RouteTable(node.monitor_dsn)
        await table.known()
        await asyncio.to_thread(node.pause)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    async with aio.GroupConsumer(node.consume_dsn, "t-cut", "g",
                                                 declare=True, context=aio_context):
                        pytest.fail("joined a paused node")
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    async with aio.RoutedGroupConsumer(table, "t-cut", "g",
                                                       context=aio_context):
                        pytest.fail("joined a paused node")
        finally:
            node.resume()
        assert all(socket.closed for socket in aio_context.made)
    run(main())


def test_group_options_filter_start_protocol_and_confirm(node, aio_context):
    async def main() -> None:
        await produce(node, aio_context, "t-options", [b"us-1"], tag="us")
        await produce(node, aio_context, "t-options", [b"eu-1"], tag="eu")
        async with aio.GroupConsumer(node.consume_dsn, "t-options", "eu-only", filter="eu",
                                     context=aio_context, protocol=1,
                                     confirm=True) as consumer:
            assert consumer.protocol == 1
            message = await consumer.receive(5)
            assert message is not None and message.parts == (b"eu-1",)
            await consumer.ack_confirmed([message], timeout=10)
            assert await consumer.receive(0.3) is None
        async with aio.GroupConsumer(node.consume_dsn, "t-options", "late", start="latest",
                                     context=aio_context) as late:
            await produce(node, aio_context, "t-options", [b"after"])
            taken = await late.receive_many(10, 5)
            assert [m.parts[0] for m in taken] == [b"after"]
            await late.nack_many(taken)  # given back: comes again
            again = [message async for message in late.messages(idle_timeout=0.5)]
            assert [m.parts[0] for m in again] == [b"after"]
            await late.ack_many(again)
    run(main())


def test_the_send_dsn_consumer_takes_the_original_frames(node, aio_context):
    async def ours(consumer: aio.Consumer) -> aio.Message:
        """The next delivery of this test's (--send-dsn also reads the topics other
        tests wrote before their groups: those are acked)."""
        while True:
            message = await consumer.receive(10)
            assert message is not None
            if message.parts[0] == b"plain":
                return message
            await message.ack()

    async def main() -> None:
        async with aio.Producer(node.receive_dsn, context=aio_context) as producer:
            assert (await producer.send([b"plain", b"two"])).ok  # no topic: --send-dsn's
        async with aio.Consumer(node.send_dsn, context=aio_context) as consumer:
            message = await ours(consumer)
            assert message.parts == (b"plain", b"two")
            other = aio.Consumer(node.send_dsn, context=aio_context)  # (it takes nothing)
            for answer in (other.ack(message), other.nack(message), other.ack_many([message])):
                with pytest.raises(ValueError, match="received by another consumer"):
                    await answer
            await other.close()
            with pytest.raises(ValueError, match="group consumer's"):
                await message.working()
            await message.nack()
            again = await ours(consumer)
            assert again.key == message.key
            await again.ack()
            rest = await consumer.receive_many(100, 0.5)
            assert b"plain" not in [message.parts[0] for message in rest]
            await consumer.ack_many(rest)
    run(main())


# -- monitor and archive ---------------------------------------------------------------


def test_monitor_requests_stats_and_the_archive_reader(node, aio_context):
    async def main() -> None:
        assert await aio.request_monitor(node.monitor_dsn, "PING", context=aio_context) \
            == b"PONG"
        answer = await aio.fetch_stats(node.monitor_dsn, context=aio_context)
        assert answer.up and "topics" in answer.stats
        assert "messages" in await aio.monitor_figures(node.monitor_dsn)
        with pytest.raises(EndpointError, match="--receive-dsn does"):
            await aio.request_monitor(node.receive_dsn, "PING", 5, context=aio_context)
        started = time.monotonic()
        with pytest.raises(EndpointError, match="does not resolve"):
            await aio.request_monitor("tcp://no-such-host.invalid:1", "PING", 30)
        assert time.monotonic() - started < 10

        await produce(node, aio_context, "t-archive", bodies("a", 8))
        async with aio.GroupConsumer(node.consume_dsn, "t-archive", "only",
                                     context=aio_context, declare=True) as consumer:
            await drain(consumer, 8)
    run(main())
    node.wait_stats(lambda s: s["archive"]["topics"].get("t-archive", {}).get("flushed_offset")
                    and all(topic["flushed_offset"] == topic["last_offset"]
                            for topic in s["archive"]["topics"].values()),
                    message="t-archive archived and durable")

    async def read() -> None:
        async with aio.ArchiveReader(node.archive_dsn, "t-archive",
                                     context=aio_context) as reader:
            assert await reader.earliest() == 0
            everything = [item async for item in reader.messages()]
            assert [m.parts[0] for _, m in everything] == bodies("a", 8)
            assert [m.parts[0] for _, m in await reader.fetch(everything[5][0])][:3] == \
                bodies("a", 8)[5:]
            assert await reader.latest() > everything[-1][0]
            with pytest.raises(ReaderError) as raised:
                await reader.fetch(await reader.latest() + 10**6)
            assert raised.value.status == zp.INVALID_OFFSET
    run(read())


# -- bad input -------------------------------------------------------------------------


def test_a_closed_consumer_and_an_unknown_option_say_so(node, aio_context):
    async def main() -> None:
        consumer = aio.GroupConsumer(node.consume_dsn, "t-closed", "g", declare=True,
                                     context=aio_context)
        waiting = asyncio.create_task(consumer.receive())
        iterating = asyncio.create_task(anext(aiter(consumer), None))
        await asyncio.sleep(0)  # both wait in the consumer
        await consumer.close()
        with pytest.raises(ClientClosed, match="consumer"):
            await waiting
        assert await iterating is None  # ``async for`` ends
        for call in (consumer.receive(), consumer.receive_many(5), consumer.join()):
            with pytest.raises(ClientClosed, match="the consumer is closed"):
                await call
        producer = aio.Producer(node.receive_dsn, context=aio_context)
        await producer.close()
        with pytest.raises(ClientClosed, match="the producer is closed"):
            await producer.publish([b"x"])
        with pytest.raises(TypeError, match="bogus"):
            aio.GroupConsumer(node.consume_dsn, "t", "g", bogus=1)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unknown option bogus"):
            aio.RoutedGroupConsumer(node.monitor_dsn, "t", "g", bogus=1)
        refused = aio.GroupConsumer(node.consume_dsn, "t-closed", "g", window=0,
                                    context=aio_context)
        with pytest.raises(ConsumeRefused, match="window '0' is not"):
            await refused.join()
        assert refused.closed
    run(main())


def test_a_node_that_never_answers_is_a_clear_error_within_the_timeout(aio_context):
    """A ROUTER that takes every request and answers none, and a port where nothing
    listens: each client says so within its timeout (and the probe's half second)."""
    async def main(silent: str, nothing: str) -> None:
        producer = aio.Producer(silent, context=aio_context)
        reader = aio.ArchiveReader(silent, "t", timeout=1, context=aio_context)

        async def flush_one() -> None:
            async with aio.Producer(silent, context=aio_context) as flushed:
                await flushed.publish([b"y"])
                await flushed.flush(timeout=1)
        calls = [
            ("no ACK within 1 s", producer.send([b"x"], timeout=1)),
            ("^1 message without ACK after 1 s: ", flush_one()),  # not "1 messages"
            ("no answer to CONSUME within 1 s", aio.GroupConsumer(
                silent, "t", "g", timeout=1, context=aio_context).join()),
            ("no answer from", aio.request_monitor(silent, "PING", 1, context=aio_context)),
            ("no answer from", reader.earliest()),
            ("nothing answers there", aio.request_monitor(nothing, "PING", 1,
                                                          context=aio_context)),
        ]
        for expected, call in calls:
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=expected) as raised:
                await call
            assert time.monotonic() - started < 4, expected
            assert "accepts connections but does not answer" in str(raised.value) \
                or "nothing answers there" in str(raised.value)
        await producer.close()
        await reader.close()

    silent = zmq.Context.instance().socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    closed = zmq.Context.instance().socket(zmq.ROUTER)
    free = closed.bind_to_random_port("tcp://127.0.0.1")
    closed.close(0)
    try:
        run(main(f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{free}"))
    finally:
        silent.close(0)


# -- cancellation ----------------------------------------------------------------------


def test_a_publish_cancelled_while_the_window_is_full_sends_nothing(aio_context):
    """A node of the test's own (a ROUTER) sees every frame: a cancelled publish left
    nothing on the socket, and one that returned went whole."""
    async def main(endpoint: str, fake: zmq.asyncio.Socket) -> None:
        async with aio.Producer(endpoint, window=2, batch=1, context=aio_context) as producer:
            sent = [await producer.publish([b"m%d" % n, b"two"]) for n in range(2)]
            blocked = asyncio.create_task(producer.publish([b"cancelled", b"two"]))
            await asyncio.sleep(0.05)
            assert not blocked.done()  # waiting for room
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            assert producer.outstanding == 2
            seen = [await fake.recv_multipart() for _ in range(2)]
            assert [frames[-2:] for frames in seen] == [[b"m0", b"two"], [b"m1", b"two"]]
            # the node answers the first: room for one more, which is not the cancelled
            peer, msg_id = seen[0][0], seen[0][1]
            await fake.send_multipart([peer, msg_id, b"1", b""])
            assert (await sent[0]).ok
            later = await producer.publish([b"later", b"two"])
            frames = await fake.recv_multipart()
            assert frames[-2:] == [b"later", b"two"]
            assert not await fake.poll(200)  # nothing else, ever: no half message
            for future, answered in ((sent[1], seen[1]), (later, frames)):
                await fake.send_multipart([answered[0], answered[1], b"1", b""])
                assert (await future).ok

    fake = aio_context.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    try:
        port = fake.bind_to_random_port("tcp://127.0.0.1")
        run(main(f"tcp://127.0.0.1:{port}", fake))
    finally:
        fake.close(0)


def test_tasks_cancelled_anywhere_in_send_lose_no_message_silently(node, aio_context):
    """Many tasks send at once and are cancelled at random moments: a message whose
    publish returned is delivered, once; one whose publish was cancelled never is. The
    cancels follow the run's progress, not the clock (a fast node finished most sends
    before a cancel timed from the start came): as each message is taken, now and then
    a task still in its publish, or one waiting for its ACK, is cancelled."""
    rng = random.Random(38)
    tasks: dict[bytes, asyncio.Task[None]] = {}

    def cancel_some(taken: set[bytes], answered: set[bytes]) -> None:
        waiting = sorted(taken - answered)  # published, their ACK not yet back
        publishing = [body for body, task in tasks.items()
                      if body not in taken and not task.done()]
        for chosen in (waiting, publishing):
            if chosen and rng.random() < 0.1:
                tasks[rng.choice(chosen)].cancel()

    async def one(producer: aio.Producer, body: bytes, taken: set[bytes],
                  answered: set[bytes]) -> None:
        future = await producer.publish([body, b"x" * rng.randrange(1, 300), b"end"],
                                        topic="t-cancel")
        taken.add(body)  # from here on the message is the producer's
        cancel_some(taken, answered)
        ack = await asyncio.shield(future)
        assert ack.ok
        answered.add(body)

    async def main() -> None:
        taken: set[bytes] = set()
        answered: set[bytes] = set()
        async with aio.Producer(node.receive_dsn, window=16, batch=4,
                                context=aio_context) as producer:
            for n in range(600):
                body = b"c%d" % n
                tasks[body] = asyncio.create_task(one(producer, body, taken, answered))
            results = await asyncio.gather(*tasks.values(), return_exceptions=True)
            failures = [r for r in results
                        if r is not None and not isinstance(r, asyncio.CancelledError)]
            assert failures == []
            await producer.flush(30)
        cancelled = sum(task.cancelled() for task in tasks.values())
        in_publish = len(tasks) - len(taken)  # cancelled before the message was taken
        print(f"cancelled {cancelled}: {in_publish} in publish, "
              f"{len(taken - answered)} waiting for their ACK")
        assert in_publish >= 5 and len(taken - answered) >= 5  # both kinds happened
        async with aio.GroupConsumer(node.consume_dsn, "t-cancel", "g", window=50,
                                     context=aio_context, declare=True) as consumer:
            got: list[tuple[bytes, ...]] = []
            while (messages := await consumer.receive_many(50, 1.0)):
                got += [message.parts for message in messages]
                await consumer.ack_many(messages)
        assert sorted(parts[0] for parts in got) == sorted(taken)  # each once, none else
        assert all(len(parts) == 3 and parts[2] == b"end" for parts in got)  # whole
    run(main())


def test_a_receive_cancelled_anywhere_loses_no_delivery(node, aio_context):
    """Deliveries stream in while receives are cancelled at random moments; with an
    ack timeout of 30 s, a delivery taken and dropped would not come back in time."""
    rng = random.Random(37)

    async def main() -> None:
        await produce(node, aio_context, "t-receive", bodies("r", 400))
        got: list[bytes] = []
        async with aio.GroupConsumer(node.consume_dsn, "t-receive", "g", window=40,
                                     context=aio_context, declare=True) as consumer:
            cancelled = 0
            deadline = time.monotonic() + 60
            while len(got) < 400 and time.monotonic() < deadline:
                many = rng.random() < 0.5
                task = asyncio.create_task(consumer.receive_many(rng.randrange(1, 30), 2)
                                           if many else consumer.receive(2))
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
                if rng.random() < 0.5 and task.cancel():
                    cancelled += 1
                    with pytest.raises(asyncio.CancelledError):
                        await task
                    continue
                found = await task
                messages = found if isinstance(found, list) else [found] if found else []
                got += [message.parts[0] for message in messages]
                await consumer.ack_many(messages)
        print(f"{cancelled} receives cancelled")
        assert cancelled >= 10
        assert sorted(got) == sorted(bodies("r", 400))
    run(main())


# -- the loop is never blocked ---------------------------------------------------------


def test_the_loop_is_never_blocked_during_a_produce_and_drain(node, aio_context):
    """A ticker asks for a turn every millisecond while 20 000 messages are produced
    and drained on the node: how late its turns come is how long the loop stalled.
    (The machine's own scheduling adds to it: the bound is loose on purpose, the
    figures are printed.)"""
    async def main() -> Ticker:
        ticker = Ticker()
        ticker.start()
        async with aio.Producer(node.receive_dsn, window=100, context=aio_context) as producer:
            for n in range(STALL_MESSAGES):
                await producer.publish([b"s%d" % n], topic="t-stall")
            await producer.flush(60)
        async with aio.GroupConsumer(node.consume_dsn, "t-stall", "g", context=aio_context,
                                     declare=True) as consumer:
            assert len(await drain(consumer, STALL_MESSAGES, 30)) == STALL_MESSAGES
        await ticker.stop()
        return ticker

    ticker = run(main(), 110)
    p99, worst = ticker.percentile(0.99), max(ticker.lates)
    print(f"loop stalls over {len(ticker.lates)} ticks: p50 {ticker.percentile(0.5) * 1e3:.2f}"
          f" ms, p99 {p99 * 1e3:.2f} ms, max {worst * 1e3:.1f} ms")
    assert len(ticker.lates) > 100
    assert p99 < 0.05, f"p99 stall {p99 * 1e3:.1f} ms"
    assert worst < 0.5, f"longest stall {worst * 1e3:.0f} ms"



def test_the_sync_produce_says_what_a_probe_finds_as_the_asyncio_send(context, aio_context):
    """The sync ``Producer.produce`` said only ``no ACK for b'...-0' within 1 s``, where
    the asyncio ``send`` says what a probe finds at the endpoint."""
    from pzq.client import Producer

    async def aio_send(dsn: str) -> str:
        async with aio.Producer(dsn, context=aio_context) as producer:
            with pytest.raises(TimeoutError) as raised:
                await producer.send([b"x"], timeout=1)
        return str(raised.value)

    silent = context.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    closed = context.socket(zmq.ROUTER)
    free = closed.bind_to_random_port("tcp://127.0.0.1")
    closed.close(0)
    try:
        for dsn, why in ((f"tcp://127.0.0.1:{port}", "it accepts connections but does not "
                          "answer"),
                         (f"tcp://127.0.0.1:{free}", "nothing answers there")):
            with Producer(dsn, context=context) as producer:
                with pytest.raises(TimeoutError) as raised:
                    producer.produce([b"x"], timeout=1)
            assert str(raised.value).startswith(f"no ACK within 1 s: {why}")
            assert str(raised.value) == run(aio_send(dsn))
    finally:
        silent.close(0)
