"""drain_list: every message waiting on a socket, whole, up to a limit, in one call,
over real ZeroMQ sockets on inproc."""

from __future__ import annotations

import pytest
import zmq

from pzq.zmqio import drain_list

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair():
    context = zmq.Context()
    reader, writer = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    for socket in (reader, writer):
        socket.setsockopt(zmq.LINGER, 0)
    reader.bind("inproc://drain-list")
    writer.connect("inproc://drain-list")
    yield reader, writer
    reader.close()
    writer.close()
    context.term()


def test_messages_of_one_two_and_more_frames_come_whole_in_order(pair):
    reader, writer = pair
    sent = [[b"a"], [b"key", b"1"], [b"x", b"", b"y", b"z"], [b""], [b"k2", b"0"]]
    for message in sent:
        writer.send_multipart(message)
    assert reader.poll(5000)
    assert drain_list(reader, 100) == sent


def test_it_stops_at_the_limit_and_leaves_the_rest_waiting(pair):
    reader, writer = pair
    for number in range(5):
        writer.send_multipart([b"%d" % number, b"1"])
    assert reader.poll(5000)
    assert drain_list(reader, 3) == [[b"0", b"1"], [b"1", b"1"], [b"2", b"1"]]
    assert drain_list(reader, 3) == [[b"3", b"1"], [b"4", b"1"]]


def test_nothing_waiting_is_an_empty_list(pair):
    reader, _ = pair
    assert drain_list(reader, 10) == []
