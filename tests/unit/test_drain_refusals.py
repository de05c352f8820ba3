"""A drain given ``looks`` (the consume endpoint's LOOK_BEFORE_EACH) of a few messages ends
on a look at the socket (``readable``), not on a refused receive (zmq.Again, which pyzmq
makes in Python: some six looks' worth): it looks before each read after its first, up
to ``looks``, and past them reads on until refused. By default it looks once (before the
second read): a drain of many messages pays no look a message, each a system call. Each
drain reads the same messages either way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import zmq

from pzq import zmqio
from pzq.bench.nodes import wait_until

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


def refusals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each zmq.Again pyzmq makes (a receive refused for want of input)."""
    made: list[int] = []
    init = zmq.Again.__init__

    def counted(self: zmq.Again, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        init(self, *args, **kwargs)
    monkeypatch.setattr(zmq.Again, "__init__", counted)
    return made


def waiting(open_socket: Sockets, name: str, count: int) -> zmq.Socket:
    """A ROUTER with ``count`` messages of two frames waiting (ACKs' shape)."""
    router, dealer = open_socket(zmq.ROUTER), open_socket(zmq.DEALER)
    router.bind(f"inproc://{name}")
    dealer.connect(f"inproc://{name}")
    for n in range(count):
        dealer.send_multipart([b"ACK", b"%d" % n])
    assert wait_until(lambda: zmqio.readable(router), 5, message="input")
    return router


def drained(how: str, router: zmq.Socket, limit: int,
            looks: int = zmqio.LOOK_BEFORE_EACH) -> list[list[bytes]]:
    if how == "framed":
        return [raw for _, raw in zmqio.drain_framed(router, limit, looks)]
    if how == "list":
        return zmqio.drain_list(router, limit, looks)
    return list(zmqio.drain(router, limit, looks))


def counted_looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each look at a socket (``readable``) a drain makes."""
    looks: list[int] = []
    readable = zmqio.readable

    def counted(socket: zmqio.AnySocket) -> bool:
        looks.append(1)
        return readable(socket)
    monkeypatch.setattr(zmqio, "readable", counted)
    return looks


@pytest.mark.parametrize("how", ["framed", "list", "generator"])
@pytest.mark.parametrize("count", [1, 2, 3, zmqio.LOOK_BEFORE_EACH])
def test_a_few_messages_are_drained_with_no_refused_receive(
        open_socket: Sockets, monkeypatch: pytest.MonkeyPatch, how: str, count: int) -> None:
    router = waiting(open_socket, f"drain-few-{how}-{count}", count)
    refused = refusals(monkeypatch)
    messages = drained(how, router, 100)
    assert [raw[1:] for raw in messages] == [[b"ACK", b"%d" % n] for n in range(count)]
    assert refused == []  # (before: one for each drain of two messages or more)
    assert not zmqio.readable(router)


@pytest.mark.parametrize("how", ["framed", "list", "generator"])
def test_many_messages_are_drained_until_refused_past_the_looks(
        open_socket: Sockets, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    count = zmqio.LOOK_BEFORE_EACH + 4
    router = waiting(open_socket, f"drain-many-{how}", count)
    refused = refusals(monkeypatch)
    looks = counted_looks(monkeypatch)
    messages = drained(how, router, 100)
    assert len(messages) == count
    assert len(refused) == 1  # the read past the last ended it
    assert len(looks) == zmqio.LOOK_BEFORE_EACH  # none before the first read


@pytest.mark.parametrize("how", ["framed", "list", "generator"])
def test_by_default_a_drain_looks_once_then_reads_until_refused(
        open_socket: Sockets, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A --send-dsn consumer's ACKs (one a message, many a wake) cost no look each."""
    router = waiting(open_socket, f"drain-default-{how}", 10)
    refused = refusals(monkeypatch)
    looks = counted_looks(monkeypatch)
    if how == "framed":
        messages = [raw for _, raw in zmqio.drain_framed(router, 100)]
    elif how == "list":
        messages = zmqio.drain_list(router, 100)
    else:
        messages = list(zmqio.drain(router, 100))
    assert len(messages) == 10
    assert (len(looks), len(refused)) == (1, 1)


@pytest.mark.parametrize("how", ["framed", "list", "generator"])
def test_a_drain_stops_at_its_limit_and_leaves_the_rest(
        open_socket: Sockets, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    router = waiting(open_socket, f"drain-limit-{how}", 12)
    refused = refusals(monkeypatch)
    assert len(drained(how, router, 3)) == 3
    assert len(drained(how, router, 100)) == 9
    assert len(refused) == 1  # (the second drain's: past its looks)
