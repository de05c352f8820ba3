"""pzq.client.common.send_before on real sockets: a DEALER with no connection to send
on (as after a refused CURVE handshake) makes a sync client's send give up at its
deadline instead of blocking for ever."""

from __future__ import annotations

import time

import pytest
import zmq

from pzq.bench.peer_servers import free_port
from pzq.client.common import send_before

pytestmark = pytest.mark.timeout(30)


def _pipeless_dealer(context: zmq.Context, endpoint: str) -> zmq.Socket:
    """A DEALER with no pipe: IMMEDIATE makes it wait for a connection, as a socket
    whose handshake failed waits for one it never gets."""
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.IMMEDIATE, 1)
    dealer.connect(endpoint)
    return dealer


def test_a_socket_with_no_connection_gives_up_at_the_deadline(context):
    dealer = _pipeless_dealer(context, f"tcp://127.0.0.1:{free_port()}")
    started = time.monotonic()
    assert not send_before(dealer, [b"one", b"two"], started + 0.3)
    assert 0.25 < time.monotonic() - started < 5  # waited for the deadline, no longer
    dealer.close(0)


def test_a_connection_that_comes_before_the_deadline_takes_the_message_whole(context):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    dealer = _pipeless_dealer(context, endpoint)
    assert not send_before(dealer, [b"early"], time.monotonic())  # nothing to take it
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(endpoint)
    assert send_before(dealer, [b"one", b"two"], time.monotonic() + 10)
    assert router.poll(10_000)
    assert router.recv_multipart()[1:] == [b"one", b"two"]
    router.close(0)
    dealer.close(0)
