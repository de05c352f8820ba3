"""The common cycle's ACK (``GroupAnswers.ack_as_sent``): an ACK of just the BATCH
last sent to a consumer, as ``ack_many`` sends it, that the consumer still holds as
that run, is taken in one call; an ACK of another shape, or one after a NACK or an
expiry of what it holds, takes the general path (``ack_numbers``), and every ACK is
applied either way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.protocol import consume as wire
from pzq.serving.answers import GroupAnswers
from pzq.serving.consume_endpoint import ConsumeEndpoint
from tests.support.devices import wake, wake_until
from tests.unit.test_acks_as_sent import ROLES, ack_frames, join, produce

pytestmark = pytest.mark.timeout(120)


@dataclass
class Paths:
    """What each ACK's path said: the fast one's answers, the general one's calls."""

    fast: list[bool] = field(default_factory=list)
    general: int = 0


@contextmanager
def one_group(open_device: Callable[..., Device], context: zmq.Context,
              monkeypatch: pytest.MonkeyPatch, count: int
              ) -> Iterator[tuple[Device, ConsumeEndpoint, zmq.Socket, Paths]]:
    """A node holding ``count`` messages of topic t, one consumer of group g (protocol
    2, a window of 100), and the paths its ACKs take, counted."""
    paths = Paths()
    fast, general = GroupAnswers.ack_as_sent, GroupAnswers.ack_numbers

    def counted_fast(self: GroupAnswers, *args: object) -> bool:
        taken = fast(self, *args)  # type: ignore[arg-type]
        paths.fast.append(taken)
        return taken

    def counted_general(self: GroupAnswers, *args: object, **kwargs: object) -> None:
        paths.general += 1
        general(self, *args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(GroupAnswers, "ack_as_sent", counted_fast)
    monkeypatch.setattr(GroupAnswers, "ack_numbers", counted_general)
    device = open_device(roles=ROLES)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    consume.topics.topic("t", Now.read().wall_us)
    producer, consumer = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
    try:
        join(device, consumer, b"g")
        produce(device, producer, count)
        yield device, consume, consumer, paths
    finally:
        producer.close(0)
        consumer.close(0)


def batch_keys(device: Device, socket: zmq.Socket) -> list[bytes]:
    wake_until(device, lambda: socket.poll(0) != 0, "a BATCH")
    return [key for key, _, _ in wire.decode_node_message(socket.recv_multipart()).entries]


def settled(device: Device) -> None:
    for _ in range(5):
        wake(device, 10)


def group_state(consume: ConsumeEndpoint):  # type: ignore[no-untyped-def]
    (deliveries,) = consume.groups.values()
    (served,) = deliveries.consumers
    return deliveries.state, served


def test_the_ack_of_each_batch_as_sent_takes_the_one_call(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """Three BATCHes ACKed as sent: each ACK takes the fast path, none the general one,
    and each is applied (nothing held or in flight, every message done, the next
    BATCH sent after each)."""
    with one_group(open_device, context, monkeypatch, 300) as (device, consume, socket,
                                                               paths):
        seen: list[bytes] = []
        for _ in range(3):
            keys = batch_keys(device, socket)
            assert len(keys) == 100
            seen += keys
            socket.send_multipart(ack_frames(keys))
        settled(device)
        state, served = group_state(consume)
        assert paths.fast == [True, True, True] and paths.general == 0
        assert len(set(seen)) == 300
        assert served.held_count == 0 and served.room == 100 and not served.held_runs
        assert len(state.inflight) == 0 and state.counters.acked == 300


def test_an_ack_of_another_shape_takes_the_general_path(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """The BATCH's keys ACKed reordered, then a piece of the next one and its rest:
    the fast path is not asked (the frame is not the one sent); each is applied."""
    with one_group(open_device, context, monkeypatch, 200) as (device, consume, socket,
                                                               paths):
        keys = batch_keys(device, socket)
        socket.send_multipart(ack_frames(keys[::-1]))
        keys = batch_keys(device, socket)
        socket.send_multipart(ack_frames(keys[:50]))
        socket.send_multipart(ack_frames(keys[50:]))
        settled(device)
        state, served = group_state(consume)
        assert paths.fast == [] and paths.general == 3
        assert served.held_count == 0 and len(state.inflight) == 0
        assert state.counters.acked == 200


def test_a_nack_between_the_batch_and_its_ack_takes_the_general_path(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """A NACK of one key in the BATCH's middle before the ACK of the whole BATCH as sent
    (the run is in the consumer's set now): the fast path says no and the general one
    applies it; the NACKed message, sent again, is ACKed with it."""
    with one_group(open_device, context, monkeypatch, 100) as (device, consume, socket,
                                                               paths):
        keys = batch_keys(device, socket)
        socket.send_multipart([wire.NACK, keys[40]])
        again = batch_keys(device, socket)  # (its credit: the one given back)
        assert again == [keys[40]]
        socket.send_multipart(ack_frames(keys))
        settled(device)
        state, served = group_state(consume)
        assert paths.fast == [False] and paths.general == 1
        assert served.held_count == 0 and served.room == 100
        assert len(state.inflight) == 0 and state.counters.acked == 100


def test_an_expiry_between_the_batch_and_its_ack_takes_the_general_path(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """The BATCH expires at the reaper (overdue at its consumer, its credit spent) and
    is then ACKed as sent: the fast path says no; the general path gives the credit
    back, and the expired messages, not delivered again, are done with (ACKed late)."""
    with one_group(open_device, context, monkeypatch, 100) as (device, consume, socket,
                                                               paths):
        keys = batch_keys(device, socket)
        consume.reap(Now.read().wall_us + 60_000_000)  # past every deadline
        state, served = group_state(consume)
        assert len(served.overdue) == 100 and served.room == 0
        assert len(state.inflight) == 0
        socket.send_multipart(ack_frames(keys))
        settled(device)
        assert paths.fast == [False] and paths.general == 1
        assert not served.overdue and served.held_count == 0 and served.room == 100
        assert state.counters.acked == 100
