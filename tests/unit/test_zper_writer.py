"""ZperWriter in process: one wake's writes from several producers, as they land.

The writer copies frames straight from ZeroMQ into each topic's record bytes; what
it writes must be what encoding each message on its own gives, in the order taken.
"""

from __future__ import annotations

import time

import pytest
import zmq

from pzq.archive.format.codec import encode_records
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.records import decode_records
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import list_segments
from pzq.archive.zper.writer import ZperWriter
from pzq.authorization import Authorizing, parse_rules
from pzq.protocol import zper as zp

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def router():
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.bind("inproc://writer")
    yield context, socket
    context.destroy(linger=0)


def producer(context, kind, topic, mode):
    socket = context.socket(kind)
    socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic, mode))
    socket.connect("inproc://writer")
    return socket


def wait_for_any(socket):
    """Until the ROUTER has a message. Every producer sent on inproc from this thread
    before this, so asking for the socket's events has it take in every pipe's
    messages at once."""
    deadline = time.monotonic() + 10
    while socket.getsockopt(zmq.EVENTS) & zmq.POLLIN == 0:
        assert time.monotonic() < deadline, "nothing reached the writer's socket"
        time.sleep(0.01)


def topic_bytes(directory):
    return b"".join(segment.path.read_bytes() for segment in list_segments(directory))


def test_one_wake_of_mixed_producers_writes_each_message_as_encoded_alone(tmp_path, router):
    context, socket = router
    archive = Archive(tmp_path)
    archive.open(now=0)
    # a topic holding pzq's records is refused to writers
    archive.append(ArchivedMessage(b"k", b"m", "mine", 1, 2, 3, 1, "c", (b"x",)), now=0)
    writer = ZperWriter(archive, "pzq", keep_all=False)
    dealer0 = producer(context, zmq.DEALER, "clicks", 0)
    dealer1 = producer(context, zmq.DEALER, "clicks", 1)
    req2 = producer(context, zmq.REQ, "views", 2)
    refused = producer(context, zmq.DEALER, "mine", 0)
    bad = context.socket(zmq.DEALER)
    bad.setsockopt(zmq.IDENTITY, b"not a zper identity")
    bad.connect("inproc://writer")
    clicks = []
    for n in range(40):
        message = [b"id-%d" % n, b"a" * (250 + n % 9), b"b" * (n * 97 % 600)]
        (dealer0 if n % 2 else dealer1).send_multipart(message)
        clicks.append(message)
    dealer0.send_multipart([b"", b"after"])  # an empty first frame and more: a delimiter
    clicks.append([b"after"])
    req2.send_multipart([b"req-id", b"v" * 256])  # REQ: a delimiter goes first
    refused.send_multipart([b"r", b"s"])
    bad.send_multipart([b"x"])
    wait_for_any(socket)

    writer.take(socket, 1000, now=0)

    # Two producers' messages interleave as ZeroMQ takes them, each one's in order.
    data = topic_bytes(tmp_path / "clicks")
    taken = list(decode_records(data))
    records = [frames for _, frames in taken]
    assert data == bytes(encode_records(records)[0])
    assert sorted(records) == sorted(clicks)
    for parity in (0, 1):
        own = [frames for frames in records if frames[0].startswith(b"id-")
               and int(frames[0][3:]) % 2 == parity]
        assert own == [frames for frames in clicks[:40] if int(frames[0][3:]) % 2 == parity]
    assert topic_bytes(tmp_path / "views") == bytes(encode_records([[b"req-id", b"v" * 256]])[0])
    figures = writer.figures
    assert (figures.written, figures.refused, figures.by_mode) == (42, 2, [21, 20, 1])
    assert figures.bytes == sum(len(frame) for message in clicks for frame in message) \
        + len(b"req-id") + 256
    # the writes to answer wait with their offsets, message ids and REQ delimiter
    durable = writer.durable()  # mode 2 is fsync'd in the wake; mode 1 waits for a flush
    assert [(w.topic, w.offset, w.envelope, w.message_id) for w in durable] == \
        [("views", 0, (b"",), b"req-id")]
    archive.sync(now=0)
    assert [(w.offset, w.message_id, w.envelope, w.mode) for w in writer.durable()] == \
        [(offset, frames[0], (), 1) for offset, frames in taken
         if frames[0].startswith(b"id-") and int(frames[0][3:]) % 2 == 0]
    archive.close(now=0)


def test_a_topic_the_authorization_rules_forbid_is_refused_and_counted(tmp_path, router):
    """Without CURVE every producer has [default]'s rights: clicks, not views; a
    producer's identity is known after its first write, and its rights are still
    asked at every write."""
    context, socket = router
    archive = Archive(tmp_path)
    archive.open(now=0)
    authorization = Authorizing(parse_rules({"default": {"produce": ["clicks"]}}), keyed=False)
    writer = ZperWriter(archive, "pzq", keep_all=False, authorization=authorization)
    allowed = producer(context, zmq.DEALER, "clicks", 0)
    forbidden = producer(context, zmq.DEALER, "views", 0)
    for number in range(3):
        allowed.send_multipart([b"a%d" % number, b"x"])
        forbidden.send_multipart([b"f%d" % number, b"y"])
    deadline = time.monotonic() + 10
    while writer.figures.written + writer.figures.refused < 6:
        assert time.monotonic() < deadline, "the writes did not all come"
        wait_for_any(socket)
        writer.take(socket, 100, now=0)
    assert (writer.figures.written, writer.figures.refused) == (3, 3)
    assert authorization.counts["produce"] == 3
    assert archive.log("views") is None and archive.log("clicks") is not None
