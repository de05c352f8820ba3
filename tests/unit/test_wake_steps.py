"""What a wake asks and polls: only the parts and store participants that do something
at a step, and the idle sockets' monitors by their descriptors (a node's loop on
inproc endpoints, driven wake by wake)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.clock import Now
from pzq.errors import BindError
from pzq.hooks import overriding
from pzq.node.device import Device
from pzq.parts import Part
from pzq.protocol import consume as consume_wire
from pzq.protocol import frames
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.send_endpoint import SendEndpoint
from pzq.store.batch import Batch, Participant
from pzq.zmqio import Events
from tests.support.devices import wake, wake_until

pytestmark = pytest.mark.timeout(30)


class Taking(Part):
    def take(self, events: Events, batch: Batch, now: Now) -> None:
        pass


class Preparing(Participant):
    def prepare(self, batch: Batch) -> None:
        pass


def test_a_step_is_asked_only_of_the_parts_and_participants_that_have_it():
    quiet, taking, patched = Part(), Taking(), Part()
    patched.finish = lambda batch, now: None  # type: ignore[method-assign]
    parts = [quiet, taking, patched]
    assert overriding(parts, Part, "take") == [taking]
    assert overriding(parts, Part, "finish") == [patched]
    assert overriding(parts, Part, "answer") == []
    idle, preparing = Participant(), Preparing()
    assert overriding([idle, preparing], Participant, "prepare") == [preparing]
    assert overriding([idle, preparing], Participant, "before_write") == []


def polled_now(device: Device) -> list[object]:
    poller = zmq.Poller()
    for polled in device.polled():
        poller.register(polled, zmq.POLLIN)
    device.interest(poller, Now.read())
    return [item for item, flags in poller.sockets if flags]


def test_a_node_polls_its_idle_monitors_by_descriptor(open_device: Callable[..., Device]):
    device = open_device(roles=("receive", "send", "monitor", "consume"))
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    wake(device, 0)  # the first wake reads whatever the monitors hold
    polled = polled_now(device)
    assert consume.connections.events not in polled and consume.connections.quiet.fd in polled
    assert consume.socket in polled and device.parts.bound()["receive"] in polled
    assert not consume.connections.quiet.unread
    assert device.poll_timeout_ms(Now.read()) != 0  # nothing to read: no wake at once


def test_the_consume_socket_is_polled_only_while_consumers_are_connected(
        open_device: Callable[..., Device], context: zmq.Context):
    """No consumer: the ROUTER is out of the poll (its monitor, by descriptor, is in);
    a connection puts it back, so the consumer's first request is answered; once the
    consumer went and what it sent before is read, it is out again."""
    device = open_device(roles=("receive", "consume"), tcp=True)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    wake(device, 0)
    wake(device, 0)  # the first wakes look once at whatever waits
    assert consume.socket not in polled_now(device)
    assert consume.connections.quiet.fd in polled_now(device)
    client = context.socket(zmq.DEALER)
    client.connect(device.bound()["consume"])
    try:
        client.send_multipart([consume_wire.HEARTBEAT])  # before CONSUME: an ERROR back
        wake_until(device, lambda: client.poll(0) != 0, "the first request answered")
        assert client.recv_multipart()[0] == consume_wire.ERROR
        assert consume.connections.connected == 1 and consume.socket in polled_now(device)
    finally:
        client.close(0)
    wake_until(device, lambda: consume.socket not in polled_now(device), "out of the poll")
    assert consume.connections.connected == 0



def test_the_send_socket_rests_out_of_the_poll_until_a_consumer_comes(
        open_device: Callable[..., Device], context: zmq.Context):
    """No consumer on --send-dsn: the endpoint is not asked what to poll at all (it
    rests from ``interest``), nor to deliver (``send_out``), and its socket is out of
    the poll; a connection, told by its monitor, puts it back, and the message stored
    meanwhile is delivered."""
    device = open_device(roles=("receive", "send"), tcp=True)
    send = next(part for part in device.parts if isinstance(part, SendEndpoint))
    producer = context.socket(zmq.DEALER)
    producer.connect(device.bound()["receive"])
    try:
        producer.send_multipart(frames.encode_produce(b"1", [b"x"], ()))
        wake_until(device, lambda: producer.poll(0) != 0, "the message stored and ACKed")
    finally:
        producer.close(0)
    for _ in range(3):  # the monitor's first look, and a read of what may wait
        wake(device, 0)
    assert device.parts.agenda.resting(send, "interest")
    assert device.parts.agenda.resting(send, "send_out")
    assert send.socket not in polled_now(device)
    consumer = context.socket(zmq.ROUTER)
    consumer.connect(device.bound()["send"])
    try:
        wake_until(device, lambda: consumer.poll(0) != 0, "the stored message delivered")
        assert not device.parts.agenda.resting(send, "interest")
        assert not device.parts.agenda.resting(send, "send_out")
        assert send.socket in polled_now(device)
    finally:
        consumer.close(0)
    wake_until(device, lambda: device.parts.agenda.resting(send, "interest"),
               "out of the poll again")
    assert device.parts.agenda.resting(send, "send_out")
    assert send.socket not in polled_now(device)


@pytest.mark.parametrize("role", ["send", "consume"])
def test_an_endpoint_that_cannot_bind_leaves_no_monitor_open(
        open_device: Callable[..., Device], context: zmq.Context, role: str):
    """The connection count's monitor is made before the bind: a bind that fails closes
    it (the test's context finds no socket left open)."""
    taken = context.socket(zmq.ROUTER)
    try:
        taken.bind("tcp://127.0.0.1:*")
        with pytest.raises(BindError, match=f"cannot bind --{role}-dsn"):
            open_device(f"--{role}-dsn", taken.getsockopt_string(zmq.LAST_ENDPOINT),
                        roles=("receive", role), tcp=True)
    finally:
        taken.close(0)


def test_the_consume_endpoint_tells_its_wait_only_when_it_may_be_shorter(
        open_device: Callable[..., Device], context: zmq.Context):
    """A wake of plain ACKs leaves the agenda's wait for the endpoint as it was (an ACK
    only takes deliveries out); a NACK, which may delay a delivery, tells it."""
    device = open_device(roles=("receive", "consume"), tcp=True)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    consume.topics.topic("orders", Now.read().wall_us)  # as a first message makes it
    told: list[bool] = []
    consume.wait_changed = lambda: told.append(True)
    client = context.socket(zmq.DEALER)
    client.connect(device.bound()["consume"])
    try:
        client.send_multipart([consume_wire.CONSUME, b"orders", b"billing", b"10"])
        wake_until(device, lambda: client.poll(0) != 0, "CONSUMING")
        assert client.recv_multipart()[0] == consume_wire.CONSUMING
        (group,) = consume.groups.values()
        wake_until(device, lambda: consume.connections.connected == 1, "the connection")
        for _ in range(3):
            wake(device, 0)
        told.clear()
        key = b"%s-%016x" % (group.state.area.node_id, 12345)  # out nowhere: unknown
        client.send_multipart([consume_wire.ACK, key])
        wake_until(device, lambda: group.counters.unknown_acks == 1, "the ACK")
        wake(device, 0)
        assert told == []
        client.send_multipart([consume_wire.NACK, key])
        wake_until(device, lambda: group.counters.unknown_acks == 2, "the NACK")
        assert told
    finally:
        client.close(0)


def test_a_producer_is_acked_the_moment_the_batch_is_written(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """Without copies, the producers' intake is the store's first participant and sends
    its ACKs from ``written``: the topics, registered with the store before it, find
    the ACK already at the producer when they are told (the other participants'
    bookkeeping and the other parts' sends come after it)."""
    device = open_device(roles=("receive", "send"))
    producer = context.socket(zmq.DEALER)
    producer.connect(device.bound()["receive"])
    topics = device.node.topics
    told = topics.written
    seen: list[bool] = []

    def written() -> None:
        seen.append(producer.poll(0) != 0)
        told()

    monkeypatch.setattr(topics, "written", written)
    try:
        producer.send_multipart(frames.encode_produce(b"1", [b"x"], ()))
        wake_until(device, lambda: producer.poll(0) != 0, "the message stored and ACKed")
        assert seen[-1], "the ACK waited for the participants registered before the intake"
    finally:
        producer.close(0)
