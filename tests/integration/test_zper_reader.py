"""ZPER's own reader sequence against pzq's archive, over DEALER and REQ.

The expected replies come from ZPER's published protocol and its reader test
(TestZPReader): ``OFFSET -2`` is the first segment's start; ``OFFSET -1`` the last
segment's start and the end offset; ``OFFSET <ms>`` the starts of the segments
modified before then, oldest first, and the end offset when every segment
qualifies; ``FETCH <last start> <max>`` the last segment's whole records. A REQ
reader gets its empty delimiter back before the status.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import zmq

from pzq.archive.format.records import decode_records
from pzq.archive.reader import ArchiveReader, resume_at
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import TopicLog, list_segments
from pzq.archive.zper.reader_server import answer, segment_offsets
from pzq.errors import NotAnArchiveReader
from pzq.protocol import zper as zp
from tests.support.harness import produce_and_consume

pytestmark = pytest.mark.timeout(60)
OK = bytes((zp.OK,))


def int64(value: int) -> bytes:
    return zp.INT64.pack(value)


def offsets_of(reply: list[bytes]) -> list[int]:
    return [zp.INT64.unpack(frame)[0] for frame in reply[1:]]


class ZperClient:
    """A reader that speaks as ZPER's Java test does, over DEALER or REQ."""

    def __init__(self, open_socket, dsn: str, kind: int, topic: str) -> None:
        self.socket = open_socket(kind)
        self.socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic))
        self.socket.connect(dsn)

    def ask(self, *frames: bytes) -> list[bytes]:
        self.socket.send_multipart(list(frames))
        assert self.socket.poll(10_000), f"no answer to {frames[0]!r}"
        return self.socket.recv_multipart()


@pytest.fixture(params=[zmq.DEALER, zmq.REQ], ids=["dealer", "req"])
def reader_kind(request) -> int:
    return request.param


def test_zper_offset_and_fetch_sequence(archived_node, context, open_socket,
                                        reader_kind):
    produce_and_consume(archived_node, context, 40)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 40, message="archived")
    segments = list_segments(archived_node.archive_dir / "even")
    assert len(segments) > 2, "the sequence needs several segments"
    end = archived_node.stats()["archive"]["topics"]["even"]["last_offset"]
    client = ZperClient(open_socket, archived_node.archive_dsn, reader_kind, "even")

    earliest = client.ask(b"OFFSET", int64(zp.EARLIEST))
    assert earliest[0][0] == zp.OK and offsets_of(earliest) == [segments[0].start]

    latest = client.ask(b"OFFSET", int64(zp.LATEST))
    assert latest[0][0] == zp.OK and offsets_of(latest) == [segments[-1].start, end]

    # Every segment was last modified before now: all their starts, then the end.
    now_ms = int(time.time() * 1000) + 1000
    before_now = client.ask(b"OFFSET", int64(now_ms))
    assert offsets_of(before_now) == [segment.start for segment in segments] + [end]
    newest_two = client.ask(b"OFFSET", int64(now_ms), zp.INT32.pack(2))
    assert offsets_of(newest_two) == [segments[-2].start, segments[-1].start, end]

    none_before = client.ask(b"OFFSET", int64(1000))  # 1 s after the epoch
    assert none_before == [bytes((zp.INVALID_OFFSET,))]

    fetched = client.ask(b"FETCH", int64(segments[-1].start), int64(2**31 - 1))
    assert fetched[0][0] == zp.OK and len(fetched) == 2
    assert len(fetched[1]) == end - segments[-1].start
    assert [frames[0] for _, frames in decode_records(fetched[1])]  # whole records


def test_req_reader_gets_its_envelope_back(archived_node, context, open_socket):
    """A REQ socket drops a reply without its delimiter; the reader would hang."""
    produce_and_consume(archived_node, context, 4)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 4, message="archived")
    raw = open_socket(zmq.DEALER)
    raw.setsockopt(zmq.IDENTITY, zp.make_identity("even"))
    raw.connect(archived_node.archive_dsn)
    raw.send_multipart([b"", b"OFFSET", int64(zp.EARLIEST)])  # what REQ puts on the wire
    assert raw.poll(10_000)
    assert raw.recv_multipart() == [b"", bytes((zp.OK,)), int64(0)]
    raw.send_multipart([b"", b"FROB"])
    assert raw.poll(10_000)
    assert raw.recv_multipart() == [b"", bytes((zp.INVALID_COMMAND,))]


EMPTY_TOPIC_ANSWERS = (  # ZPER's ZLog: a segment 0 that holds nothing, never modified
    ([b"OFFSET", int64(zp.EARLIEST)], [OK, int64(0)]),
    ([b"OFFSET", int64(zp.LATEST)], [OK, int64(0), int64(0)]),
    ([b"OFFSET", int64(1_700_000_000_000)], [OK, int64(0), int64(0)]),
    ([b"OFFSET", int64(1_700_000_000_000), zp.INT32.pack(1)], [OK, int64(0), int64(0)]),
    ([b"OFFSET", int64(0)], [bytes((zp.INVALID_OFFSET,))]),  # not modified before 0
    ([b"OFFSET", int64(-5)], [bytes((zp.INVALID_OFFSET,))]),
    ([b"FETCH", int64(0), int64(1 << 20)], [OK, b""]),
)


def test_an_unknown_topic_answers_as_zpers_zlog_does(archived_node, context, open_socket):
    """TestZPReader's testOffset on a topic nothing was written to."""
    client = ZperClient(open_socket, archived_node.archive_dsn, zmq.DEALER, "never-seen")
    for request, expected in EMPTY_TOPIC_ANSWERS:
        assert client.ask(*request) == expected, request
    with ArchiveReader(archived_node.archive_dsn, "never-seen", context=context) as reader:
        assert (reader.earliest(), reader.latest(), list(reader.messages())) == (0, 0, [])


def test_an_empty_topic_on_disk_answers_as_an_unknown_one(tmp_path):
    (tmp_path / "empty").mkdir()
    archive = Archive(tmp_path)
    archive.open(now=0)
    log = archive.log("empty")
    assert log is not None and log.end_offset == 0 and len(log.segments) == 1
    identity = zp.make_identity("empty")
    for request, expected in EMPTY_TOPIC_ANSWERS:
        assert answer(archive, identity, request) == expected, request
    archive.close(now=0)


def test_a_fetch_gets_only_what_an_fsync_made_durable(tmp_path):
    """As ZPER's reader answers up to its segment's flushed offset: records appended
    and not yet fsync'd are not handed out (a power cut could take them back, and a
    later write put other bytes at their offsets); once synced, they are."""
    archive = Archive(tmp_path, flush_messages=1000, flush_interval_ms=3_600_000)
    archive.open(now=0)
    identity = zp.make_identity("clicks")
    archive.append_raw("clicks", [[b"one"], [b"two"]], now=0)
    log = archive.log("clicks")
    assert log is not None and log.end_offset > 0 and log.flushed_offset == 0
    fetch = [b"FETCH", int64(0), int64(1 << 20)]
    assert answer(archive, identity, fetch) == [OK, b""]  # nothing durable yet
    assert answer(archive, identity, [b"OFFSET", int64(zp.LATEST)]) == [
        OK, int64(0), int64(log.end_offset)]  # the end written, as ZPER's -1 answers
    archive.sync(now=1)
    written = log.end_offset
    archive.append_raw("clicks", [[b"three"]], now=1)
    reply = answer(archive, identity, fetch)
    assert reply[0] == OK and len(reply[1]) == written  # the synced records, not "three"
    assert [frames for _, frames in decode_records(bytes(reply[1]), 0)] == [[b"one"],
                                                                             [b"two"]]
    archive.sync(now=2)
    assert len(answer(archive, identity, fetch)[1]) == log.end_offset
    archive.close(now=2)


def test_offsets_by_modification_time(tmp_path):
    """Segments modified at 1 000, 2 000 and 3 000 s after the epoch."""
    log = TopicLog(tmp_path / "t", segment_size=10, flush_messages=1, flush_interval_s=1)
    log.open(now=0)
    for i in range(3):
        log.append([b"x" * 20, b"%d" % i], now=0)
    log.close(now=0)
    segments = log.segments
    assert len(segments) == 3
    for seconds, segment in zip((1000, 2000, 3000), segments, strict=True):
        os.utime(segment.path, (seconds, seconds))
    starts = [segment.start for segment in segments]

    assert segment_offsets(log, 500_000, None) == []
    assert segment_offsets(log, 1_500_000, None) == starts[:1]
    assert segment_offsets(log, 2_500_000, None) == starts[:2]
    assert segment_offsets(log, 2_500_000, 1) == starts[1:2]
    assert segment_offsets(log, 3_000_000, None) == starts[:2]  # strictly before
    assert segment_offsets(log, 3_500_000, None) == [*starts, log.end_offset]
    assert segment_offsets(log, 3_500_000, 1) == [starts[2], log.end_offset]
    assert segment_offsets(log, zp.LATEST, None) == [starts[2], log.end_offset]
    assert segment_offsets(log, zp.EARLIEST, None) == [starts[0]]
    with pytest.raises(ValueError):
        segment_offsets(log, -5, None)


def test_a_kept_offset_past_the_end_is_an_error_not_a_read_of_nothing(archived_node, context):
    """messages() of an offset past the end (one kept from another or a reset archive)
    handed out nothing, every run, without a word."""
    produce_and_consume(archived_node, context, 10)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 10, message="archived")
    with ArchiveReader(archived_node.archive_dsn, "even", context=context) as reader:
        end = reader.latest()
        with pytest.raises(ValueError, match=f"^offset {end + 7} is past the end of the "
                                             f"archive of topic even \\({end}\\)"):
            list(reader.messages(end + 7))
        assert list(reader.messages(end)) == []  # the end itself: nothing new yet


def test_a_reader_at_another_endpoint_of_the_node_is_told_so(archived_node, context):
    """At the node's --monitor-dsn (a ROUTER, so it answers) the reader said 'archive
    reader answered status 79': the first byte of the monitor's reply ('OFFSET')."""
    line = (f"{archived_node.monitor_dsn} answered b'OFFSET', which is no archive "
            "reader's status byte: give the node's --archive-dsn")
    with ArchiveReader(archived_node.monitor_dsn, "even", context=context) as reader:
        with pytest.raises(NotAnArchiveReader) as told:
            list(reader.messages())
    assert str(told.value) == line


async def _aio_read(dsn: str, timeout: float = 10.0) -> None:
    from pzq import aio

    async with aio.ArchiveReader(dsn, "even", timeout=timeout) as reader:
        async for _ in reader.messages():
            pass


def test_an_asyncio_reader_at_another_endpoint_is_told_so(archived_node):
    with pytest.raises(NotAnArchiveReader, match="no archive reader's status byte"):
        asyncio.run(_aio_read(archived_node.monitor_dsn))


def test_a_reader_at_a_node_s_send_dsn_is_told_within_seconds(archived_node, context):
    """A DEALER (--send-dsn) never answers: the reader waited out its timeout and said
    'a busy node, not a pzq endpoint, or a node that requires CURVE'."""
    line = (f"{archived_node.send_dsn} did not answer within 1 s, and a DEALER answers "
            "there (no ROUTER), as at a node's --send-dsn: give the node's --archive-dsn")
    started = time.monotonic()
    with ArchiveReader(archived_node.send_dsn, "even", context=context,
                       timeout=30) as reader:
        with pytest.raises(NotAnArchiveReader) as told:
            reader.latest()
    assert str(told.value) == line
    assert time.monotonic() - started < 10  # of a 30 s timeout
    started = time.monotonic()
    with pytest.raises(NotAnArchiveReader, match="a DEALER answers there"):
        asyncio.run(_aio_read(archived_node.send_dsn, timeout=30))
    assert time.monotonic() - started < 10


def test_a_kept_offset_retention_deleted_goes_on_from_the_first_kept():
    assert resume_at("even", 100, 4000, 9000) == 4000  # said in one warning line
    assert (resume_at("even", None, 4000, 9000), resume_at("even", 5000, 4000, 9000)) == (
        4000, 5000)
