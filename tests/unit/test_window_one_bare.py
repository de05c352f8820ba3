"""A wake's one message with no header and one part (the original protocol's producer
at window 1), sent to ``default`` as it is: stored in one call (``Intake._take_bare``),
with the record, the counts and the ACK of the general way; a message that asks a look
(a header, a second part, a limit of size or room, a producer's own rights, a
partitioned ``default``) still goes the general way and gets its answer (a node's loop
on inproc endpoints, driven wake by wake)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from pzq.node.device import Device
from pzq.node.intake import Intake
from pzq.protocol import frames
from pzq.store import keyspace, record
from tests.support.devices import producer_socket, wake_until
from tests.support.stored import FailNext

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


def answer(device: Device, socket: zmq.Socket, message: list[bytes]) -> frames.ProducerAck:
    socket.send_multipart(message)
    wake_until(device, lambda: bool(socket.poll(0)), "the producer's ACK")
    return frames.decode_producer_ack(socket.recv_multipart())


def counted(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Calls of ``Intake.name`` from here on (wrapped, still done)."""
    calls: list[int] = []
    inner = getattr(Intake, name)

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return inner(*args, **kwargs)
    monkeypatch.setattr(Intake, name, counting)
    return calls


def with_default(device: Device) -> Device:
    """``default`` made before the first message (which would make it the general way)."""
    store = device.node.store
    batch = store.begin()
    device.node.topics.topic("default", 1)
    store.commit(batch)
    return device


def stored_records(device: Device) -> list[record.Record]:
    return [record.decode(value)
            for _, value in device.node.store.scan(keyspace.OWN_PREFIX)]


def test_a_bare_message_is_stored_in_one_call_as_the_general_way_stores_it(
        open_device: Callable[..., Device], open_socket: Sockets,
        monkeypatch: pytest.MonkeyPatch):
    device = open_device()
    socket = producer_socket(device, open_socket)
    singles = counted(monkeypatch, "_take_singles")
    bodies = [b"first", b"", b"x" * 100, bytes(range(256))]
    for n, body in enumerate(bodies):
        assert answer(device, socket, frames.encode_produce(b"m%d" % n, [body])).ok
    assert singles == [1]  # (the first made ``default``; the others the short way)
    records = stored_records(device)
    assert [(r.msg_id, r.headers, r.parts) for r in records] == [
        (b"m%d" % n, (), (body,)) for n, body in enumerate(bodies)]
    # the bytes the general way's encode makes of it
    values = [value for _, value in device.node.store.scan(keyspace.OWN_PREFIX)]
    assert values == [record.encode(r.msg_id, (), r.parts, r.stored_us) for r in records]
    store, topic = device.node.store, device.node.topics.topics["default"]
    assert (store.messages, topic.messages, topic.received) == (4, 4, 4)
    assert topic.stored_bytes == store.bytes == sum(map(len, values))
    assert device.node.counters.received == 4


@pytest.mark.parametrize("message", [
    frames.encode_produce(b"h", [b"body"], (b"TOPIC:orders",)),  # a header
    frames.encode_produce(b"p", [b"one", b"two"]),  # two parts
], ids=["header", "two-parts"])
def test_a_message_that_is_not_bare_goes_the_general_way(
        open_device: Callable[..., Device], open_socket: Sockets,
        monkeypatch: pytest.MonkeyPatch, message: list[bytes]):
    device = with_default(open_device())
    socket = producer_socket(device, open_socket)
    singles = counted(monkeypatch, "_take_singles")
    assert answer(device, socket, message).ok
    assert len(singles) == 1
    [stored] = stored_records(device)
    assert stored.msg_id == message[0]


def test_limits_of_size_are_answered_as_before(open_device: Callable[..., Device],
                                               open_socket: Sockets):
    device = with_default(open_device("--max-message-size", "10"))
    socket = producer_socket(device, open_socket)
    too_big = answer(device, socket, frames.encode_produce(b"big", [b"x" * 11]))
    assert not too_big.ok
    assert too_big.status_message == b"message body of 11 bytes exceeds the limit of 10 bytes"
    long_id = answer(device, socket, frames.encode_produce(b"i" * 256, [b"body"]))
    assert not long_id.ok
    assert long_id.status_message == frames.msg_id_refusal(256).encode()
    assert answer(device, socket, frames.encode_produce(b"ok", [b"x" * 10])).ok
    assert [r.msg_id for r in stored_records(device)] == [b"ok"]


def test_malformed_messages_are_refused_as_before(open_device: Callable[..., Device],
                                                  open_socket: Sockets):
    device = with_default(open_device())
    socket = producer_socket(device, open_socket)
    no_body = answer(device, socket, [b"n", b""])
    assert not no_body.ok and b"no body part" in no_body.status_message
    no_delimiter = answer(device, socket, [b"d", b"body"])
    assert not no_delimiter.ok and b"missing empty delimiter" in no_delimiter.status_message
    assert stored_records(device) == []


def test_a_limit_of_room_is_still_looked_at(open_device: Callable[..., Device],
                                            open_socket: Sockets,
                                            monkeypatch: pytest.MonkeyPatch):
    device = with_default(open_device("--max-messages", "1"))
    socket = producer_socket(device, open_socket)
    singles = counted(monkeypatch, "_take_singles")
    assert answer(device, socket, frames.encode_produce(b"1", [b"body"])).ok
    assert not answer(device, socket, frames.encode_produce(b"2", [b"body"])).ok
    assert len(singles) == 2 and device.node.store.messages == 1


def test_a_producer_with_rights_of_its_own_is_looked_at(
        open_device: Callable[..., Device], open_socket: Sockets, tmp_path: Path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[default]\nproduce = ["open.*"]\n')
    device = with_default(open_device("--authorization", str(rules)))
    socket = producer_socket(device, open_socket)
    refused = answer(device, socket, frames.encode_produce(b"1", [b"body"]))
    assert not refused.ok
    assert refused.status_message.startswith(b"FORBIDDEN produce default: this client key may")
    assert device.node.store.messages == 0


def test_a_partitioned_default_is_looked_at(open_device: Callable[..., Device],
                                            open_socket: Sockets,
                                            monkeypatch: pytest.MonkeyPatch):
    device = with_default(open_device("--partitions", "default=4"))
    socket = producer_socket(device, open_socket)
    singles = counted(monkeypatch, "_take_singles")
    assert answer(device, socket, frames.encode_produce(b"1", [b"body"])).ok
    assert len(singles) == 1 and device.node.store.messages == 1


def test_a_failed_write_refuses_the_bare_message_and_the_next_is_stored(
        open_device: Callable[..., Device], open_socket: Sockets):
    device = open_device()
    socket = producer_socket(device, open_socket)
    failing = FailNext()
    device.node.store.register(failing)
    failing.armed = True
    lost = answer(device, socket, frames.encode_produce(b"lost", [b"body"]))
    assert not lost.ok and lost.status_message == b"not stored: the disk is full"
    assert device.node.store.messages == 0 and stored_records(device) == []
    assert answer(device, socket, frames.encode_produce(b"kept", [b"body"])).ok
    assert [r.msg_id for r in stored_records(device)] == [b"kept"]
    topic = device.node.topics.topics["default"]
    assert (topic.messages, device.node.store.messages) == (1, 1)
