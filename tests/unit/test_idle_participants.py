"""A wake's store batch asks nothing of a participant that owes it nothing (pzq.store:
``idle``): a delivery state between the writes its deliveries, ACKs and given-up
deliveries owe, the producers' intake in a wake that read no producer; what each
owes is still written with the batch that should hold it (a real store, and a node's
loop on inproc endpoints driven wake by wake)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.clock import Now
from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.settings import DeliverySettings
from pzq.errors import StoreError
from pzq.node.device import Device
from pzq.node.intake_part import IntakePart
from pzq.protocol import frames
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.store.store import Store
from tests.support.devices import wake, wake_until
from tests.support.stored import FailNext, stored
from tests.unit.test_delivery_state import Consumers, ack, new_state

pytestmark = pytest.mark.timeout(30)
TIMEOUT = 1_000


def test_a_delivery_state_is_asked_only_while_it_owes_the_store(store: Store):
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), Counters())
    seqs = stored(store, 3)
    store.commit(store.begin())
    assert state.idle  # nothing delivered, nothing owed
    state.deliver(Consumers(), 100, 100)
    assert not state.idle  # how far the first deliveries went: the next batch's
    store.commit(store.begin())
    assert state.idle and OwnArea(store).delivered_below() == seqs[-1] + 1
    ack(state, seqs[0])  # an ACK in a batch begun while the state was idle
    assert store.messages == 2 and not state.owed.any_leaving() and state.idle


def test_a_delivery_given_up_is_written_by_the_next_batch(store: Store):
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000, max_deliveries=1), Counters())
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 100)
    store.commit(store.begin())
    assert state.idle
    state.nack(seq)  # delivered once, the most: to the dead letters
    assert not state.idle
    store.commit(store.begin())
    assert (store.messages, store.dead_letters) == (0, 1) and state.idle


def test_a_failed_batch_keeps_the_state_asked_until_its_deletes_are_written(store: Store):
    fail = FailNext()
    store.register(fail)
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), Counters())
    seqs = stored(store, 2)
    state.deliver(Consumers(), 100, 100)
    store.commit(store.begin())
    fail.armed = True
    batch = store.begin()
    state.ack(batch, seqs[0])
    with pytest.raises(StoreError):
        store.commit(batch)
    assert not state.idle and store.messages == 2  # the delete is owed again
    store.commit(store.begin())
    assert store.messages == 1 and state.idle


def producer(context: zmq.Context, device: Device) -> zmq.Socket:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(device.bound()["receive"])
    return socket


def test_the_intake_is_asked_by_the_write_only_in_a_wake_that_read_producers(
        open_device: Callable[..., Device], context: zmq.Context):
    device = open_device()
    intake = next(part for part in device.parts if isinstance(part, IntakePart))
    socket = producer(context, device)
    try:
        wake(device)
        assert intake.idle  # nothing read: the write has no producer to ACK
        socket.send_multipart(frames.encode_produce(b"1", [b"x"], (b"TOPIC:t",)))
        wake_until(device, lambda: socket.poll(0) != 0, "the producer's ACK")
        assert frames.decode_producer_ack(socket.recv_multipart()).ok
        assert intake.idle and device.node.store.messages == 1
    finally:
        socket.close(0)


def test_the_consume_socket_is_registered_with_the_poll_only_when_its_flags_change(
        open_device: Callable[..., Device]):
    device = open_device(roles=("receive", "consume"))
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    poller = zmq.Poller()

    def entry() -> tuple[zmq.Socket, int]:
        (found,) = [entry for entry in poller.sockets if entry[0] is consume.socket]
        return found

    device.interest(poller, Now.read())
    registered = entry()
    device.interest(poller, Now.read())
    assert entry() is registered  # the poll's own entry, not registered again
