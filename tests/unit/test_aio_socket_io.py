"""pzq.aio.socket_io on real sockets, no node: what a socket cannot take now waits in
the Outbox and goes first, whole and in order; a wait takes nothing and a close under
it is ClientClosed, not a cancellation of the waiting task."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from pzq.aio.socket_io import AsyncSocket, Outbox, wait_any, wait_events
from pzq.errors import ClientClosed
from pzq.zmqio import recv_frames
from tests.support.aio import run

pytestmark = pytest.mark.timeout(30)


def test_what_the_socket_cannot_take_waits_and_goes_in_order_whole(aio_context):
    async def main() -> None:
        dealer = aio_context.socket(zmq.DEALER, socket_class=AsyncSocket)
        dealer.setsockopt(zmq.SNDHWM, 1)
        dealer.setsockopt(zmq.LINGER, 0)
        endpoint = "inproc://outbox-order"
        dealer.connect(endpoint)  # nobody there yet: the pipe takes little
        out = Outbox(dealer, "test")
        for n in range(20):
            out.put([b"m%d" % n, b"second", b"third"])
        assert 0 < len(out) < 20  # the rest waits, in turn
        router = aio_context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(endpoint)
        assert await out.drained(5)
        got = [await router.recv_multipart() for _ in range(20)]
        assert [frames[1:] for frames in got] == [[b"m%d" % n, b"second", b"third"]
                                                  for n in range(20)]
        out.dropped()
        router.close(0)
        dealer.close(0)
    run(main())


def test_a_close_under_a_wait_is_client_closed_and_a_cancel_stays_a_cancel(aio_context):
    async def main() -> None:
        socket = aio_context.socket(zmq.DEALER, socket_class=AsyncSocket)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect("inproc://nobody-here")
        waiting = asyncio.create_task(wait_events(socket, zmq.POLLIN, None, "consumer"))
        cancelled = asyncio.create_task(wait_events(socket, zmq.POLLIN, None, "consumer"))
        await asyncio.sleep(0)  # each task runs to its wait
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert not await wait_events(socket, zmq.POLLIN, 0.01)  # nothing came, nothing taken
        socket.close(0)
        with pytest.raises(ClientClosed, match="the consumer was closed while waiting"):
            await waiting
        with pytest.raises(ClientClosed, match="the consumer is closed"):
            await wait_events(socket, zmq.POLLIN, 1, "consumer")
    run(main())


def test_a_wait_woken_by_input_then_closed_before_it_runs_is_client_closed(aio_context):
    # A consumer's receive woken by the node's answer while another task closes it:
    # the wait must not return to a read of a closed socket.
    async def main() -> None:
        ours = aio_context.socket(zmq.PAIR, socket_class=AsyncSocket)
        theirs = aio_context.socket(zmq.PAIR)
        for socket in (ours, theirs):
            socket.setsockopt(zmq.LINGER, 0)
        ours.bind("inproc://woken-then-closed")
        theirs.connect("inproc://woken-then-closed")
        waiting = asyncio.create_task(wait_events(ours, zmq.POLLIN, 5, "consumer"))
        await asyncio.sleep(0)  # the task waits on its future now
        theirs.send(b"answer")
        deadline = asyncio.get_running_loop().time() + 5
        while not ours.ready() & zmq.POLLIN:  # wakes the waiter, which has not run yet
            assert asyncio.get_running_loop().time() < deadline, "no input came"
            await asyncio.sleep(0.001)
        ours.close(0)
        with pytest.raises(ClientClosed, match="the consumer was closed while waiting"):
            await waiting
        theirs.close(0)
    run(main())


def test_a_wait_on_several_sockets_wakes_at_the_first_input_and_leaves_no_waiter(aio_context):
    async def main() -> None:
        pairs = []
        for name in ("a", "b"):
            ours = aio_context.socket(zmq.PAIR, socket_class=AsyncSocket)
            theirs = aio_context.socket(zmq.PAIR)
            for socket in (ours, theirs):
                socket.setsockopt(zmq.LINGER, 0)
            ours.bind(f"inproc://several-{name}")
            theirs.connect(f"inproc://several-{name}")
            pairs.append((ours, theirs))
        (a, _), (b, b_peer) = pairs
        assert not await wait_any([a, b], zmq.POLLIN, 0.05)  # nothing: False at the timeout
        waiting = asyncio.create_task(wait_any([a, b], zmq.POLLIN, 5))
        await asyncio.sleep(0)  # each task runs to its wait
        assert not waiting.done()
        b_peer.send(b"hello")
        assert await waiting
        assert recv_frames(b) == [b"hello"]  # the wait took nothing
        assert not a._waiters and not b._waiters
        for ours, theirs in pairs:
            ours.close(0)
            theirs.close(0)
    run(main())
