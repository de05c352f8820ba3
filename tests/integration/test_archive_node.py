"""The archive through a real node: every acked message, readable by ZPER readers (the
nodes in this process, on loopback ports of their own, but the SIGKILLed daemons)."""

from __future__ import annotations

import pytest
import zmq

from pzq.archive.format.files import read_topic
from pzq.archive.reader import ArchiveReader
from pzq.archive.tier.topiclog import list_segments
from pzq.client import Consumer, GroupConsumer, Producer
from pzq.errors import ReaderError
from pzq.protocol import zper as zp
from tests.support.archive_damage import archive_tool
from tests.support.harness import produce_and_consume, wait_until

pytestmark = pytest.mark.timeout(60)


def test_every_acked_message_is_archived_and_nothing_else(archived_node, context):
    unacked = produce_and_consume(archived_node, context, 40, ack_every=4)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 10, message="archived")
    messages = [m for topic in ("even", "odd")
                for _, m in read_topic(archived_node.archive_dir, topic)]
    bodies = {m.parts[0] for m in messages}
    assert bodies == {b"body %d" % i for i in range(0, 40, 4)}
    assert not bodies & set(unacked)
    first = messages[0]
    assert first.parts[1] == b"part two" and first.deliveries == 1
    assert first.stored_us <= first.first_delivered_us <= first.acked_us
    assert first.origin == archived_node.stats()["node_id"]
    assert first.key.startswith(first.origin.encode() + b"-")
    assert len(list_segments(archived_node.archive_dir / "even")) > 1  # it rolled


def test_zper_reader_resumes_and_answers_bad_requests(archived_node, context, open_socket):
    produce_and_consume(archived_node, context, 30)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 30, message="archived")
    with ArchiveReader(archived_node.archive_dsn, "even", context=context) as reader:
        assert reader.earliest() == 0
        everything = list(reader.messages())
        assert [m.parts[0] for _, m in everything] == [b"body %d" % i for i in range(0, 30, 2)]
        middle_offset = everything[7][0]
        resumed = list(reader.messages(middle_offset))
        assert resumed == everything[7:]
        # next_offset is where a resume goes on after the record handed out last
        after: list[int] = []
        for _ in reader.messages():
            after.append(reader.next_offset)
        assert after == [offset for offset, _ in everything[1:]] + [reader.latest()]
        assert list(reader.messages(after[7])) == everything[8:]
        assert reader.latest() == archived_node.stats()["archive"]["topics"]["even"]["last_offset"]
        with pytest.raises(ReaderError) as raised:
            reader.fetch(reader.latest() + 10**6)
        assert raised.value.status == zp.INVALID_OFFSET

    raw = open_socket(zmq.DEALER)
    raw.setsockopt(zmq.IDENTITY, zp.make_identity("even"))
    raw.connect(archived_node.archive_dsn)
    for request, status in (([b"FROB"], zp.INVALID_COMMAND),
                            ([b"FETCH", b"\x00" * 3, b"\x00" * 8], zp.INVALID_COMMAND),
                            ([b"OFFSET", b"\x00" * 8, b"\x00\x00\x00\x01"], zp.INVALID_OFFSET)):
        raw.send_multipart(request)
        assert raw.poll(10000)
        assert raw.recv_multipart()[0][0] == status
    assert archived_node.figures()["messages"] == 0  # the node kept running and serving


def test_torn_archive_tail_is_cut_on_restart(archived_daemon, context):
    archived_node = archived_daemon  # a daemon: it is SIGKILLed
    produce_and_consume(archived_node, context, 6)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 6, message="archived")
    archived_node.kill()
    segment = list_segments(archived_node.archive_dir / "even")[-1]
    data = segment.path.read_bytes()
    segment.path.write_bytes(data[:-3])  # a crash in the middle of a frame
    archived_node.restart()
    produce_and_consume(archived_node, context, 2)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 2, message="archived again")
    bodies = [m.parts[0] for _, m in read_topic(archived_node.archive_dir, "even")]
    assert bodies == [b"body 0", b"body 2", b"body 0"]  # the torn one cut, appends clean


def independent_zper_parse(data: bytes) -> list[list[bytes]]:
    """A parser written from the ZPER format description alone, sharing no pzq code:
    flag byte (0x01 more, 0x02 long), 1-byte or 8-byte big-endian length, payload."""
    records, frames, position = [], [], 0
    while position < len(data):
        flag = data[position]
        assert flag in (0, 1, 2, 3), f"bad flag at {position}"
        if flag & 2:
            length = int.from_bytes(data[position + 1:position + 9], "big")
            position += 9
        else:
            length = data[position + 1]
            position += 2
        frames.append(data[position:position + length])
        assert len(frames[-1]) == length, "truncated frame"
        position += length
        if not flag & 1:
            records.append(frames)
            frames = []
    assert not frames, "a record without its last frame"
    return records


def test_segments_of_a_real_run_parse_with_an_independent_reader(archived_node, context):
    with Producer(archived_node.receive_dsn, context=context) as producer:
        for size in (0, 254, 255, 256, 70_000):
            producer.send([b"s" * size, b"tail"], headers=[b"TOPIC:sizes"])
        producer.flush(15)
    with Consumer(archived_node.send_dsn, context=context) as consumer:
        for _ in range(5):
            consumer.receive(10).ack()
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 5, message="archived")
    records = [record for segment in list_segments(archived_node.archive_dir / "sizes")
               for record in independent_zper_parse(segment.path.read_bytes())]
    assert [len(record[2]) for record in records] == [0, 254, 255, 256, 70_000]
    assert all(record[3] == b"tail" and record[0].count(b"-") == 1 for record in records)


def test_dead_letters_are_archived_with_their_history(start_inproc_node, context, tmp_path):
    node = start_inproc_node("--archive-dir", str(tmp_path / "archive"), "--max-deliveries",
                             "2", "--ack-timeout", "200000", "--reaper-frequency", "50000",
                             consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        producer.produce([b"poison"], headers=[b"TOPIC:bad"])
    with Consumer(node.send_dsn, context=context) as consumer:
        assert consumer.receive(10) is not None and consumer.receive(10) is not None
        node.wait_stats(lambda s: s["dead_letters"] == 1 and s["archive"]["archived"] == 1,
                        message="dead letter archived")
    # On disk by the --flush-interval timer (one second) at the latest.
    ((_, message),) = wait_until(lambda: list(read_topic(tmp_path / "archive", "bad")), 10,
                                 message="the dead letter on disk")
    assert (message.outcome, message.deliveries, message.parts) == ("dead_letter", 2,
                                                                     (b"poison",))
    assert message.first_delivered_us <= message.acked_us


def test_a_sigkill_right_after_the_acks_loses_no_archived_record(start_node, context, tmp_path):
    # Default flush settings: nothing is fsync'd yet when the node dies, but every
    # record was handed to the kernel before its store delete was written.
    archive = tmp_path / "archive"
    node = start_node("--archive-dir", str(archive))
    produce_and_consume(node, context, 200)
    node.wait_figures(lambda f: f["messages"] == 0, message="every delete written")
    node.kill()
    node.restart()
    node.wait_figures(lambda f: f["messages"] == 0, message="nothing back in the store")
    archived = {m.parts[0] for topic in ("even", "odd") for _, m in read_topic(archive, topic)}
    assert archived == {b"body %d" % i for i in range(200)}


def test_a_header_is_read_one_way_for_the_store_and_the_archive(archived_node, context):
    """``topic:`` in lower case, and a repeated ``TOPIC``: the topic the message is
    stored and delivered under is the one it is archived under."""
    with Producer(archived_node.receive_dsn, context=context) as producer:
        producer.send([b"lower"], headers=[b"topic:orders"])
        producer.send([b"repeated"], headers=[b"TOPIC:first", b"TOPIC:orders"])
        assert all(ack.ok for ack in producer.flush(15))
    assert set(archived_node.stats()["topics"]) >= {"orders"}
    assert "first" not in archived_node.stats()["topics"]
    with Consumer(archived_node.send_dsn, context=context) as consumer:
        for _ in range(2):
            consumer.receive(10).ack()
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 2, message="archived")
    assert sorted(m.parts[0] for _, m in read_topic(archived_node.archive_dir, "orders")) \
        == [b"lower", b"repeated"]


def test_an_ack_of_many_keys_archives_what_acks_of_one_key_each_do(start_inproc_node, context,
                                                                    tmp_path):
    """One node's group ACKs 60 deliveries in one frame (their messages archived in one
    call), another's one key a frame (one by one): the same records, in produce order,
    read from the files, by ArchiveReader and by pzq-archive dump."""
    read: dict[str, list[tuple[object, ...]]] = {}
    for name, per_frame in (("many", 60), ("one", 1)):
        archive = tmp_path / name  # (--hard-sync: the reader serves what was fsync'd)
        node = start_inproc_node("--archive-dir", str(archive), "--archive-dsn",
                                 "tcp://127.0.0.1:*", "--segment-size", "2000",
                                 "--ack-timeout", "60000000", "--hard-sync", tcp=True)
        consumer = GroupConsumer(node.consume_dsn, "orders", "g1", window=100, declare=True,
                                 context=context)
        try:
            with Producer(node.receive_dsn, context=context) as producer:
                for i in range(60):
                    producer.send([b"body %d" % i, b"x" * (i * 9)],  # frames past 255 bytes
                                  headers=[b"TOPIC:orders", *([b"TAG:t%d" % i] if i % 3 else [])])
                assert all(ack.ok for ack in producer.flush(15))
            got = consumer.receive_many(60, timeout=10)
            while len(got) < 60:
                got += consumer.receive_many(60 - len(got), timeout=10)
            for at in range(0, 60, per_frame):
                consumer.ack_many(got[at:at + per_frame])
            node.wait_stats(lambda s: s["archive"]["archived"] == 60, message="archived")
        finally:
            consumer.close()
        in_files = [message for _, message in read_topic(archive, "orders")]
        with ArchiveReader(node.event("node_ready")["archive"], "orders",
                           context=context) as reader:
            assert [message for _, message in reader.messages()] == in_files
        dumped = archive_tool("dump", str(archive), "orders")
        assert dumped.returncode == 0 and dumped.stderr == ""
        assert [line.split()[1].encode() for line in dumped.stdout.splitlines()] == [
            message.key for message in in_files]
        assert len(list_segments(archive / "orders")) > 1  # it rolled
        read[name] = [(m.topic, m.parts, m.headers, m.groups, m.outcome, m.deliveries)
                      for m in in_files]
    assert [parts[0] for _, parts, *_ in read["many"]] == [b"body %d" % i for i in range(60)]
    assert read["many"] == read["one"]


def test_acks_of_many_keys_on_send_dsn_archive_each_topic_in_order(archived_node, context):
    """``default`` on --send-dsn reads across topics: a wake's ACKs of messages of two
    topics, applied at once, archive each topic's in order, once."""
    unacked = produce_and_consume(archived_node, context, 40, ack_every=1)
    assert unacked == []
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 40, message="archived")
    for topic, first in (("even", 0), ("odd", 1)):
        bodies = [m.parts[0] for _, m in read_topic(archived_node.archive_dir, topic)]
        assert bodies == [b"body %d" % i for i in range(first, 40, 2)]
