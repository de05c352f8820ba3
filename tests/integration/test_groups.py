"""Topics and consumer groups on real nodes in this process (tests.support.inproc, on
loopback ports of their own): --consume-dsn, one stored copy, many readers. What needs
a daemon (a SIGKILL, the tools) is in test_groups_daemon.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import zmq

from pzq import aio
from pzq.client import Consumer, ConsumeRefused, GroupConsumer, Producer
from pzq.protocol import consume as wire
from tests.support.harness import wait_until
from tests.support.inproc import AnyNode, InprocNode

FAST = ("--ack-timeout", "30s", "--reaper-frequency", "100ms", "--consume-heartbeat", "1s")


@pytest.fixture
def group_node(start_inproc_node) -> InprocNode:
    return start_inproc_node(*FAST, tcp=True)


def produce(node: AnyNode, context: zmq.Context, bodies: list[bytes], topic: str = "orders",
            tag: str | None = None) -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for body in bodies:
            producer.send([body], topic=topic, tag=tag)
        assert all(ack.ok for ack in producer.flush(15))


def drain(consumer: Consumer, count: int, ack: bool = True, timeout: float = 10) -> list[bytes]:
    got = []
    for _ in range(count):
        message = consumer.receive(timeout)
        assert message is not None, f"only {len(got)} of {count} delivered"
        got.append(message.parts[0])
        if ack:
            message.ack()
    return got


def topic_figures(node: AnyNode, topic: str = "orders") -> dict:
    return node.stats()["topics"][topic]


def test_three_groups_each_receive_every_message_once(group_node, context):
    produce(group_node, context, [b"first"])  # the topic exists once used
    bodies = [b"m%d" % n for n in range(60)]
    consumers = [GroupConsumer(group_node.consume_dsn, "orders", name, window=10,
                               context=context) for name in ("billing", "audit", "search")]
    try:
        produce(group_node, context, bodies)
        groups = topic_figures(group_node)["groups"]
        assert [groups[name]["backlog"] for name in ("billing", "audit", "search")] == [61] * 3
        for consumer in consumers:
            got = drain(consumer, 61)
            assert got == [b"first", *bodies]
            assert consumer.receive(0.3) is None  # nothing twice
    finally:
        for consumer in consumers:
            consumer.close()
    # named groups alone read the topic: it shrinks as they ACK, and --send-dsn (which
    # nobody reads here) keeps no copy
    group_node.wait_stats(lambda s: s["messages"] == 0 and s["topics"]["orders"]["messages"] == 0)
    with Consumer(group_node.send_dsn, context=context) as plain:
        assert plain.receive(0.3) is None


def test_send_dsn_keeps_a_topic_it_read_before_the_groups_came(group_node, context):
    produce(group_node, context, [b"early"])
    with Consumer(group_node.send_dsn, context=context) as plain:
        assert drain(plain, 1) == [b"early"]  # read there: --send-dsn keeps the topic
        group_node.wait_stats(lambda s: s["topics"]["orders"]["default_rule"] == "all")
        with GroupConsumer(group_node.consume_dsn, "orders", "audit", context=context) as audit:
            produce(group_node, context, [b"late"])
            assert drain(audit, 1) == [b"late"] and drain(plain, 1) == [b"late"]
    group_node.wait_stats(lambda s: s["messages"] == 0)
    assert group_node.ask("TOPICS").startswith("orders messages=0 bytes=0 "
                                               "groups=default,audit\n")


def test_deleted_only_after_the_last_group_acks(group_node, context):
    produce(group_node, context, [b"a", b"b"])
    group_node.keep_default()
    with GroupConsumer(group_node.consume_dsn, "orders", "one", context=context) as one, \
            GroupConsumer(group_node.consume_dsn, "orders", "two", context=context) as two, \
            Consumer(group_node.send_dsn, context=context) as plain:
        drain(one, 2)
        drain(plain, 2)
        group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["one"]["acked"] == 2
                              and s["acked"] == 2)
        assert group_node.stats()["messages"] == 2  # "two" has not acked
        drain(two, 2)
        group_node.wait_stats(lambda s: s["messages"] == 0)


def test_two_consumers_in_a_group_share_without_overlap(group_node, context):
    produce(group_node, context, [b"x"])
    first = GroupConsumer(group_node.consume_dsn, "orders", "workers", window=5, context=context)
    second = GroupConsumer(group_node.consume_dsn, "orders", "workers", window=5,
                           context=context)
    try:
        produce(group_node, context, [b"m%d" % n for n in range(9)])
        held_first = [first.receive(5) for _ in range(5)]
        held_second = [second.receive(5) for _ in range(5)]
        keys_first = {message.key for message in held_first if message is not None}
        keys_second = {message.key for message in held_second if message is not None}
        assert len(keys_first) == 5 and len(keys_second) == 5
        assert not keys_first & keys_second
        assert first.receive(0.3) is None  # credits: 5 unacked each, no more
    finally:
        first.close()
        second.close()


def test_credits_never_exceeded(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(50)])
    with GroupConsumer(group_node.consume_dsn, "orders", "slow", window=3,
                       context=context) as consumer:
        held = [consumer.receive(5) for _ in range(3)]
        assert all(held)
        assert consumer.receive(0.5) is None
        figures = topic_figures(group_node)["groups"]["slow"]
        assert figures["inflight"] == 3 and figures["credits"] == 0
        held[0].ack()
        assert consumer.receive(5) is not None
        assert consumer.receive(0.3) is None


def test_many_deliveries_answered_in_one_ack_or_nack(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(8)])
    with GroupConsumer(group_node.consume_dsn, "orders", "batched", window=8,
                       context=context) as consumer:
        held = [consumer.receive(5) for _ in range(8)]
        assert all(held) and consumer.receive(0.3) is None  # the credits are used up
        consumer.nack_many(held[:3])  # given back: delivered again, before newer ones
        again = [consumer.receive(5) for _ in range(3)]
        assert [m.parts[0] for m in again] == [b"m0", b"m1", b"m2"]
        consumer.ack_many([*again, *held[3:]])
        wait_until(lambda: topic_figures(group_node)["groups"]["batched"]["backlog"] == 0)
        figures = topic_figures(group_node)["groups"]["batched"]
        assert figures["inflight"] == 0 and figures["credits"] == 8
        assert consumer.receive(0.3) is None and consumer.errors == []


def test_consumer_with_topic_and_group_speaks_the_consume_protocol(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(5)])
    group_node.keep_default()
    with Consumer(group_node.consume_dsn, topic="orders", group="billing", window=2,
                  filter="", start="earliest", context=context) as consumer:
        assert isinstance(consumer, GroupConsumer)
        held = [consumer.receive(5) for _ in range(2)]
        assert [message.parts[0] for message in held] == [b"m0", b"m1"]
        assert consumer.receive(0.5) is None  # window 2: no third while two are unacked
        figures = topic_figures(group_node)["groups"]["billing"]
        assert (figures["inflight"], figures["consumers"]) == (2, 1)
        for message in held:
            message.ack()
        assert drain(consumer, 3) == [b"m2", b"m3", b"m4"]
    group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["acked"] == 5)
    # without topic and group it is the original consumer on --send-dsn, as before
    with Consumer(group_node.send_dsn, context=context) as plain:
        assert type(plain) is Consumer
        assert sorted(drain(plain, 5)) == [b"m%d" % n for n in range(5)]


def test_consumer_group_options_are_checked(group_node, context):
    with pytest.raises(TypeError, match="both topic= and group="):
        Consumer(group_node.consume_dsn, topic="orders", context=context)
    with pytest.raises(TypeError, match="window= only with topic= and group="):
        Consumer(group_node.send_dsn, window=5, context=context)
    with pytest.raises(TypeError, match="timeout= only with .* receive.timeout"):
        Consumer(group_node.send_dsn, timeout=5, context=context)
    with pytest.raises(TypeError, match="window="):
        Consumer(group_node.consume_dsn, context, topic="orders", group="g")
    with pytest.raises(ConsumeRefused):
        Consumer(group_node.consume_dsn, topic="bad/name", group="g", context=context)


def test_disconnect_gives_deliveries_back_at_once(group_node, context):
    produce(group_node, context, [b"m%d" % n for n in range(4)])
    gone = GroupConsumer(group_node.consume_dsn, "orders", "g", window=4, context=context)
    assert all(gone.receive(5) for _ in range(4))
    gone._links.close()  # (its monitor, which closing the consumer ends first)
    gone._socket.close(0)  # no BYE: the connection just goes
    with GroupConsumer(group_node.consume_dsn, "orders", "g", window=4,
                       context=context) as other:
        got = drain(other, 4, timeout=3)  # well inside the 30 s ack timeout
    assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_late_group_starts_where_asked(group_node, context):
    produce(group_node, context, [b"old1", b"old2"])
    with GroupConsumer(group_node.consume_dsn, "orders", "new", start="latest",
                       context=context) as latest, \
            GroupConsumer(group_node.consume_dsn, "orders", "all", start="earliest",
                          context=context) as earliest:
        produce(group_node, context, [b"new1"])
        assert drain(latest, 1) == [b"new1"]
        assert latest.receive(0.3) is None
        assert drain(earliest, 3) == [b"old1", b"old2", b"new1"]


def test_a_group_starts_at_a_time_given_as_a_datetime_or_in_iso_8601(group_node, context):
    """A JetStream consumer's start time is a datetime (OptStartTime), pzq-ctl's and
    pzq-consume's --start ISO 8601: GroupConsumer takes both, as µs since the epoch
    (the node refused the text: 'START:2026-... is not earliest, latest or µs')."""
    produce(group_node, context, [b"old"])
    since = datetime.now(UTC)  # after old's ACK: old was stored before it
    produce(group_node, context, [b"new"])
    with GroupConsumer(group_node.consume_dsn, "orders", "by_datetime", start=since,
                       context=context) as by_datetime, \
            GroupConsumer(group_node.consume_dsn, "orders", "by_text",
                          start=since.isoformat(), context=context) as by_text:
        for consumer in (by_datetime, by_text):
            assert drain(consumer, 1) == [b"new"]
            assert consumer.receive(0.3) is None


@pytest.mark.parametrize("start", ["bogus", "0a1b2c3d-0000000000000007", -5, 1.5, None])
def test_a_start_that_is_no_time_is_refused_before_anything_is_sent(group_node, context,
                                                                    start):
    for make in (GroupConsumer, aio.GroupConsumer):
        with pytest.raises(ValueError, match="^start must be"):
            make(group_node.consume_dsn, "orders", "never", start=start, declare=True)
    assert "never" not in group_node.ask("TOPICS")


def test_filtered_group_sees_only_its_tag(group_node, context):
    produce(group_node, context, [b"eu1"], tag="eu-west")
    with GroupConsumer(group_node.consume_dsn, "orders", "eu", filter="eu-*",
                       context=context) as eu, \
            GroupConsumer(group_node.consume_dsn, "orders", "us", filter="us",
                          context=context) as us, \
            Consumer(group_node.send_dsn, context=context) as plain:
        produce(group_node, context, [b"us1"], tag="us")
        produce(group_node, context, [b"eu2"], tag="eu-north")
        produce(group_node, context, [b"none"])
        assert drain(eu, 2) == [b"eu1", b"eu2"]
        assert drain(us, 1) == [b"us1"]
        assert eu.receive(0.3) is None and us.receive(0.1) is None
        group_node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["eu"]["backlog"] == 0
                              and s["topics"]["orders"]["groups"]["us"]["backlog"] == 0)
        # what no named group's filter takes stays for --send-dsn (nothing is stranded)
        assert drain(plain, 1) == [b"none"] and plain.receive(0.3) is None
        assert "groups=eu,us default=unclaimed" in group_node.ask("TOPICS")
        # what a filter leaves out counts as done for that group
        group_node.wait_stats(lambda s: s["messages"] == 0)
    # a consumer joining without a filter gets the group's; another filter is refused
    produce(group_node, context, [b"us2"], tag="us")
    produce(group_node, context, [b"eu3"], tag="eu-south")
    with GroupConsumer(group_node.consume_dsn, "orders", "eu", context=context) as joined:
        assert drain(joined, 1) == [b"eu3"] and joined.receive(0.3) is None
    with pytest.raises(ConsumeRefused, match="group eu of topic orders has filter 'eu-\\*', "
                                             "not 'us'"):
        with GroupConsumer(group_node.consume_dsn, "orders", "eu", filter="us",
                           context=context) as wrong:
            wrong.receive(1)


def test_topics_are_apart(group_node, context):
    produce(group_node, context, [b"o1"], topic="orders")
    produce(group_node, context, [b"c1"], topic="clicks")
    with GroupConsumer(group_node.consume_dsn, "clicks", "g", context=context) as clicks:
        produce(group_node, context, [b"o2"], topic="orders")
        produce(group_node, context, [b"c2"], topic="clicks")
        assert drain(clicks, 2) == [b"c1", b"c2"]
        assert clicks.receive(0.3) is None
    stats = group_node.wait_stats(lambda s: s["topics"]["clicks"]["messages"] == 0)["topics"]
    assert stats["orders"]["messages"] == 2  # --send-dsn's: nobody read it


def test_bad_requests_get_clear_errors_and_the_node_goes_on(group_node, context):
    produce(group_node, context, [b"x"])
    with pytest.raises(ConsumeRefused, match="no topic 'nope'"):
        GroupConsumer(group_node.consume_dsn, "nope", "g", context=context)
    with pytest.raises(ConsumeRefused, match="must be 1-255"):
        GroupConsumer(group_node.consume_dsn, "orders", "bad/name", context=context)
    with pytest.raises(ConsumeRefused, match="default is the consumers on --send-dsn"):
        GroupConsumer(group_node.consume_dsn, "orders", "default", context=context)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(group_node.consume_dsn)
    try:
        for request, reason in (
                ([b"CONSUME", b"orders"], b"CONSUME needs topic, group and window"),
                ([b"CONSUME", b"orders", b"g", b"0"], b"is not a number from 1"),
                ([b"CONSUME", b"orders", b"g", b"5", b"COLOUR:red"], b"is not FILTER:value"),
                ([b"CONSUME", b"orders", b"g", b"5", *[b"ACK:00000000-0000000000000001"] * 10_001],
                 b"CONSUME has more than 10000 ACK:key options"),
                ([b"CONSUME", b"orders", b"g", b"5", b"ACK:notakey"],
                 b"CONSUME option b'ACK:notakey': notakey is not a pzq message key"),
                ([b"ACK", b"whatever"], b"ACK before CONSUME"),
                ([b"FETCH"], b"unknown request 'FETCH'")):
            dealer.send_multipart(request)
            assert dealer.poll(5000)
            answer = dealer.recv_multipart()
            assert answer[0] == wire.ERROR and reason in answer[1], answer
            if request[0] == b"ACK":  # and its keys, to be sent again with a CONSUME
                assert dealer.poll(5000)
                assert dealer.recv_multipart() == [wire.REFUSED, wire.ACK, b"whatever"]
        dealer.send_multipart([b"CONSUME", b"orders", b"g", b"5"])
        assert dealer.poll(5000) and dealer.recv_multipart()[0] == wire.CONSUMING
        while dealer.poll(1000):
            if dealer.recv_multipart()[0] == wire.DELIVER:
                break
        dealer.send_multipart([b"ACK", b"not-a-key"])
        answer = wait_until(lambda: _next_non_heartbeat(dealer), 5)
        assert answer[0] == wire.ERROR and b"is not a pzq message key" in answer[1]
    finally:
        dealer.close()
    with GroupConsumer(group_node.consume_dsn, "orders", "g", context=context) as consumer:
        assert drain(consumer, 1) == [b"x"]  # given back when the dealer went


def _next_non_heartbeat(socket: zmq.Socket) -> list[bytes] | None:
    while socket.poll(100):
        frames = socket.recv_multipart()
        if frames[0] != wire.HEARTBEAT:
            return frames
    return None


def test_bad_topic_name_is_refused(group_node, context):
    with Producer(group_node.receive_dsn, context=context) as producer:
        ack = producer.produce([b"x"], headers=[b"TOPIC:../etc"])
    assert not ack.ok and b"must be 1-255" in ack.status_message


def test_delivery_headers_on_the_consume_endpoint(start_inproc_node, context):
    node = start_inproc_node(*FAST, "--delivery-headers", tcp=True)
    produce(node, context, [b"x"], tag="eu")
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        message = consumer.receive(5)
        message.nack()
        again = consumer.receive(5)
    assert message.deliveries == 1 and again.deliveries == 2
    assert again.headers["TAG"] == "eu" and again.headers["TOPIC"] == "orders"


def test_archived_once_when_every_group_is_done_naming_the_groups(start_inproc_node, context,
                                                                  tmp_path):
    from pzq.archive.reader import ArchiveReader
    node = start_inproc_node(*FAST, "--archive-dir", str(tmp_path / "archive"),
                             "--archive-dsn", f"ipc://{tmp_path}/reader", "--flush-interval",
                             "50", tcp=True)
    produce(node, context, [b"o1", b"o2"])
    node.keep_default()
    produce(node, context, [b"p1"], topic="plain")
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing, \
            Consumer(node.send_dsn, context=context) as plain:
        drain(billing, 2)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["acked"] == 2)
        assert node.stats()["archive"]["archived"] == 0  # default has not acked
        drain(plain, 3)
        node.wait_stats(lambda s: s["archive"]["archived"] == 3 and s["messages"] == 0)
    node.wait_archive_durable()  # what a FETCH hands out
    with ArchiveReader(f"ipc://{tmp_path}/reader", "orders", context=context) as reader:
        orders = [message for _, message in reader.fetch(0)]
    with ArchiveReader(f"ipc://{tmp_path}/reader", "plain", context=context) as reader:
        plains = [message for _, message in reader.fetch(0)]
    assert [(m.parts, m.groups) for m in orders] == [((b"o1",), ("billing", "default")),
                                                     ((b"o2",), ("billing", "default"))]
    assert [(m.parts, m.groups) for m in plains] == [((b"p1",), ())]


def test_given_up_by_the_last_group_is_archived_as_a_dead_letter(start_inproc_node, context,
                                                                 tmp_path):
    from pzq.archive.format.files import read_topic
    node = start_inproc_node(*FAST, "--archive-dir", str(tmp_path / "archive"),
                             "--max-deliveries", "2", "--flush-interval", "50", tcp=True)
    produce(node, context, [b"first"])  # the topic exists once used
    node.keep_default()
    with GroupConsumer(node.consume_dsn, "orders", "billing", window=1, start="latest",
                       context=context) as billing:
        produce(node, context, [b"poison", b"fine"])
        with Consumer(node.send_dsn, context=context) as plain:
            drain(plain, 3)  # default is done; billing still holds the last two
        node.wait_stats(lambda s: s["acked"] == 3)
        assert node.stats()["archive"]["archived"] == 1  # first: only default held it
        for _ in range(2):  # delivered twice, given back twice: given up
            poison = billing.receive(5)
            assert poison is not None and poison.parts == (b"poison",)
            poison.nack()
        assert drain(billing, 1) == [b"fine"]
        node.wait_stats(lambda s: s["messages"] == 0 and s["archive"]["archived"] == 3,
                        message="both deleted and archived")
    groups = node.stats()["topics"]["orders"]["groups"]["billing"]
    assert (groups["dead_lettered"], groups["acked"]) == (1, 1)
    assert node.stats()["dead_letters"] == 1  # kept, as default's are
    archived = wait_until(lambda: [m for _, m in read_topic(tmp_path / "archive", "orders")]
                          if len(list(read_topic(tmp_path / "archive", "orders"))) == 3
                          else None, 10, message="all three on disk")
    by_body = {message.parts: message for message in archived}
    poison, fine = by_body[(b"poison",)], by_body[(b"fine",)]
    assert (poison.outcome, poison.groups, poison.deliveries) == ("dead_letter",
                                                                 ("billing", "default"), 2)
    assert (fine.outcome, fine.groups) == ("acked", ("billing", "default"))


def test_a_dead_letter_the_archive_cannot_take_stays_in_the_dead_letters(start_inproc_node, context,
                                                                         tmp_path):
    from tests.integration.test_topic_admin import ask
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "orders").write_bytes(b"")  # the topic's folder cannot be made: writes fail
    node = start_inproc_node(*FAST, "--archive-dir", str(archive), "--max-deliveries", "1",
                             "--flush-interval", "50", tcp=True)
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders billing",
                    "REMOVE GROUP orders default"):  # billing is the only holder
        assert not ask(node, command).startswith("ERROR"), command
    produce(node, context, [b"poison"])
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing:
        poison = billing.receive(5)
        assert poison is not None and poison.parts == (b"poison",)
        poison.nack()
        node.wait_stats(lambda s: s["dead_letters"] == 1 and s["archive"]["failures"] >= 1,
                        message="given up, the archive write failed")
        assert billing.receive(0.3) is None  # given up: not delivered again
    assert node.stats()["messages"] == 0
    assert poison.key.decode() in ask(node, "DEAD")
    ask(node, "REQUEUE ALL")  # and an operator can send it to the group again
    with GroupConsumer(node.consume_dsn, "orders", "billing", context=context) as billing:
        assert drain(billing, 1, ack=False) == [b"poison"]


def test_a_time_start_on_a_topic_without_a_log_finds_its_first_message(group_node, context):
    import time

    produce(group_node, context, [b"old1", b"old2"])  # no named group yet: no log
    since_us = time.time_ns() // 1000
    produce(group_node, context, [b"new1", b"new2"])
    with GroupConsumer(group_node.consume_dsn, "orders", "since", start=since_us,
                       context=context) as since:
        assert drain(since, 2) == [b"new1", b"new2"]
        assert since.receive(0.3) is None
    assert topic_figures(group_node)["groups"]["since"]["backlog"] == 0


