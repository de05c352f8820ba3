"""ZPAck in process, over real sockets: a subscriber whose queue is full holds acks
back instead of losing them, and what goes past the backlog is counted as dropped."""

from __future__ import annotations

import pytest
import zmq

from pzq import sockets
from pzq.archive.zper.ack import ZperAck
from pzq.archive.zper.writer import Written
from pzq.bench.nodes import wait_until
from pzq.protocol import zper as zp

pytestmark = pytest.mark.timeout(30)
ID_BYTES = 16_384  # large acks, so that kernel buffers cannot hide a full queue


def writes(count: int) -> list[Written]:
    return [Written("big", n * 100, b"producer", (), b"%05d" % n + b"i" * (ID_BYTES - 5), 0)
            for n in range(count)]


def stalled_subscriber(open_socket, dsn: str) -> zmq.Socket:
    subscriber = open_socket(zmq.SUB)
    subscriber.setsockopt(zmq.RCVHWM, 1)
    subscriber.setsockopt(zmq.RCVBUF, 4096)
    subscriber.subscribe(b"big")
    subscriber.connect(dsn)
    return subscriber


def open_ack(context, open_socket, sndhwm: int, backlog: int) -> tuple[ZperAck, zmq.Socket]:
    xpub = sockets.bind(context, zmq.XPUB, "tcp://127.0.0.1:*", "--zper-ack-dsn",
                        options={zmq.SNDHWM: sndhwm})
    ack = ZperAck(xpub, backlog=backlog)
    subscriber = stalled_subscriber(open_socket, sockets.bound_endpoint(xpub))
    wait_until(lambda: xpub.poll(100) and (ack.take_subscriptions(10) or ack.subscriptions),
               10, message="the subscription")
    return ack, subscriber


def read_all(ack: ZperAck, subscriber: zmq.Socket, count: int) -> list[bytes]:
    """What the subscriber gets once it reads, the node sending kept acks meanwhile."""
    got: list[bytes] = []
    while len(got) < count:
        ack.send_kept()
        if subscriber.poll(10_000 if not ack.waiting else 5):
            got.append(zp.decode_ack(subscriber.recv_multipart())[1][:5])
        else:
            assert ack.waiting, f"{len(got)} of {count} acks"
    assert not subscriber.poll(100), "no more acks than were published"
    return got


def test_a_full_subscriber_queue_holds_acks_back_instead_of_losing_them(context,
                                                                        open_socket):
    ack, subscriber = open_ack(context, open_socket, sndhwm=1000, backlog=100_000)
    ack.publish(writes(3000))  # 48 MB: past the queue and the kernel's buffers
    assert ack.waiting > 0 and ack.published + ack.waiting == 3000 and ack.dropped == 0
    assert read_all(ack, subscriber, 3000) == [b"%05d" % n for n in range(3000)]
    assert (ack.published, ack.waiting, ack.dropped) == (3000, 0, 0)
    ack.socket.close(linger=0)


def test_acks_past_the_backlog_are_dropped_and_counted(context, open_socket):
    ack, subscriber = open_ack(context, open_socket, sndhwm=10, backlog=50)
    ack.publish(writes(2000))
    assert ack.waiting == 50 and ack.dropped > 0
    assert ack.published + ack.waiting + ack.dropped == 2000
    sent = ack.published + ack.waiting
    assert read_all(ack, subscriber, sent) == [b"%05d" % n for n in range(sent)]
    assert (ack.published, ack.dropped) == (sent, 2000 - sent)
    ack.socket.close(linger=0)
