"""The loop's poll (pzq.polling.WakePoller) against zmq.Poller's answers, on real
sockets: input waiting is found without a wait even when nothing will make a
socket's descriptor readable again (its command was read by a call on the socket
since), a wait ends when input comes, and plain descriptors are told in zmq_poll's
words."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import zmq

from pzq.polling import WakePoller

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]  # tests/conftest.py's open_socket: closed after
LONG_MS = 10_000  # a wait the tests must never sit out


@pytest.fixture
def pair(open_socket: Sockets) -> tuple[zmq.Socket, zmq.Socket]:
    """A ROUTER (polled, as --receive-dsn's) and a DEALER that sends to it."""
    router, dealer = open_socket(zmq.ROUTER), open_socket(zmq.DEALER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    return router, dealer


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


def timed_poll(poller: WakePoller, timeout_ms: int | None) -> tuple[dict[object, int], float]:
    started = time.monotonic()
    events = poller.poll(timeout_ms)
    return dict(events), time.monotonic() - started


def until_input(socket: zmq.Socket) -> None:
    """Until ``socket`` has a message waiting (asked by EVENTS, which reads its
    mailbox: its descriptor will not signal that message again)."""
    deadline = time.monotonic() + 10
    while not socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
        assert time.monotonic() < deadline, "the message never came"
        time.sleep(0.005)


def test_input_whose_signal_was_read_already_is_found_without_waiting(pair):
    router, dealer = pair
    poller = WakePoller()
    poller.register(router, zmq.POLLIN)
    dealer.send(b"one")
    until_input(router)  # its descriptor was read: only EVENTS tells of the message now
    events, took = timed_poll(poller, LONG_MS)
    assert events == {router: zmq.POLLIN}
    assert took < 1.0


def test_a_wait_ends_when_input_comes_and_then_says_nothing_once_read(pair):
    router, dealer = pair
    poller = WakePoller()
    poller.register(router, zmq.POLLIN)
    assert poller.poll(0) == {}  # nothing yet, no wait
    sender = threading.Timer(0.05, dealer.send, (b"late",))
    sender.start()
    try:
        events, took = timed_poll(poller, LONG_MS)
    finally:
        sender.join()
    assert events == {router: zmq.POLLIN}
    assert took < LONG_MS / 1000 / 2
    assert router.recv_multipart()[-1] == b"late"
    assert poller.poll(0) == {}  # read: nothing more


def test_a_socket_out_of_the_poll_is_not_told_and_room_is(pair):
    router, dealer = pair
    poller = WakePoller()
    poller.register(router, zmq.POLLIN)
    poller.register(dealer, zmq.POLLOUT)  # connected: room to send
    dealer.send(b"one")
    until_input(router)
    poller.register(router, 0)  # out of the poll: its input is not told
    events, _ = timed_poll(poller, LONG_MS)
    assert events == {dealer: zmq.POLLOUT}
    poller.register(dealer, 0)
    assert poller.poll(0) == {}
    poller.register(router, zmq.POLLIN)  # back in the poll
    assert poller.poll(0) == {router: zmq.POLLIN}


def test_plain_descriptors_in_zmq_polls_words(pipe, pair):
    read, write = pipe
    router, dealer = pair
    poller = WakePoller()
    poller.register(read, zmq.POLLIN)
    poller.register(router, zmq.POLLIN)
    os.write(write, b"x")
    assert poller.poll(LONG_MS) == {read: zmq.POLLIN}
    dealer.send(b"one")
    until_input(router)
    assert poller.poll(LONG_MS) == {read: zmq.POLLIN, router: zmq.POLLIN}  # both, at once
    os.read(read, 1)
    os.close(write)  # the other end gone: a hang-up, told as zmq_poll tells it
    assert poller.poll(LONG_MS) == {read: zmq.POLLERR, router: zmq.POLLIN}
    poller.register(read, 0)
    assert poller.poll(0) == {router: zmq.POLLIN}


def test_nothing_to_tell_waits_the_timeout(pair):
    router, _ = pair
    poller = WakePoller()
    poller.register(router, zmq.POLLIN)
    events, took = timed_poll(poller, 50)
    assert events == {}
    assert 0.04 <= took < 5
