"""A wake of one producer's message whose headers ask no look at it (no DEDUP-ID, due
time, expiry, priority, partition or room to check): stored and counted in its topic
without the intake's checks or a run of one (a node's loop on inproc endpoints, driven
wake by wake); its batch's write asks the topics' log blocks nothing when none
changed, makes each topic's counts key once, and leaves the log's sync state as it was
when it is already unsynced and no sync runs. What these skip is still done when there
is something to do."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.node.device import Device
from pzq.node.intake import Intake
from pzq.node.intake_model import StoredRun
from pzq.protocol import frames
from pzq.store import keyspace, log_blocks, log_sync, topic_counts
from tests.support.devices import producer_socket, wake_until

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]


def produce(device: Device, socket: zmq.Socket, msg_id: bytes, *headers: bytes) -> None:
    socket.send_multipart(frames.encode_produce(msg_id, [b"body"], headers))
    wake_until(device, lambda: bool(socket.poll(0)), "the producer's ACK")
    assert frames.decode_producer_ack(socket.recv_multipart()).ok


def counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """Calls of ``owner.name`` from here on (wrapped, still done)."""
    calls: list[int] = []
    inner = getattr(owner, name)

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return inner(*args, **kwargs)
    monkeypatch.setattr(owner, name, counting)
    return calls


def test_a_plain_message_alone_is_stored_without_checks_or_a_run(
        open_device: Callable[..., Device], open_socket: Sockets,
        monkeypatch: pytest.MonkeyPatch):
    device = open_device()
    socket = producer_socket(device, open_socket)
    produce(device, socket, b"0", b"TOPIC:orders")  # (the topic is made)
    accepts = counted(monkeypatch, Intake, "_accept")
    notes = counted(monkeypatch, StoredRun, "note")
    flushes = counted(monkeypatch, StoredRun, "flush")
    for n in range(1, 11):
        produce(device, socket, b"%d" % n, b"TOPIC:orders")
    assert (accepts, notes, flushes) == ([], [], [])
    topic = device.node.topics.topics["orders"]
    assert (topic.messages, topic.received, topic.stored_bytes) == (
        11, 11, device.node.store.bytes)


def test_a_message_that_asks_a_look_still_has_it(open_device: Callable[..., Device],
                                                  open_socket: Sockets,
                                                  monkeypatch: pytest.MonkeyPatch):
    device = open_device()
    socket = producer_socket(device, open_socket)
    accepts = counted(monkeypatch, Intake, "_accept")
    produce(device, socket, b"1", b"DEDUP-ID:a")
    produce(device, socket, b"2", b"TTL:60")
    assert len(accepts) == 2
    socket.send_multipart(frames.encode_produce(b"3", [b"body"], (b"DEDUP-ID:a",)))
    wake_until(device, lambda: bool(socket.poll(0)), "the repeat's ACK")
    ack = frames.decode_producer_ack(socket.recv_multipart())
    assert ack.ok and ack.status_message == frames.DUPLICATE
    assert device.node.store.messages == 2


def test_a_batch_that_cleared_no_log_block_asks_no_flush(
        open_device: Callable[..., Device], open_socket: Sockets,
        monkeypatch: pytest.MonkeyPatch):
    device = open_device()
    socket = producer_socket(device, open_socket)
    produce(device, socket, b"0")
    flushes = counted(monkeypatch, log_blocks.LogBlocks, "flush")
    for n in range(1, 11):
        produce(device, socket, b"%d" % n)
    assert flushes == []


def test_each_topic_s_counts_key_is_made_once(open_device: Callable[..., Device],
                                              open_socket: Sockets,
                                              monkeypatch: pytest.MonkeyPatch):
    made: list[int] = []
    counts_key = keyspace.counts_key

    def making(owner_id: int) -> bytes:
        made.append(owner_id)
        return counts_key(owner_id)
    monkeypatch.setattr(topic_counts.keyspace, "counts_key", making)
    device = open_device()
    socket = producer_socket(device, open_socket)
    for n in range(10):
        produce(device, socket, b"%d" % n, b"TOPIC:a" if n % 2 else b"TOPIC:b")
    topics = device.node.topics.topics
    assert sorted(made) == sorted([topics["a"].id, topics["b"].id])
    # ... and what is stored under it is the topic's counts, as before
    stored = device.node.store.get(counts_key(topics["a"].id))
    assert stored is not None
    assert stored == topic_counts.COUNTS.pack(
        topics["a"].messages, topics["a"].stored_bytes)


def test_an_unsynced_log_s_state_is_not_asked_again(open_device: Callable[..., Device],
                                                    open_socket: Sockets,
                                                    monkeypatch: pytest.MonkeyPatch):
    device = open_device("--sync-interval", "1h")
    socket = producer_socket(device, open_socket)
    sync = device.node.store.log_sync
    writes = counted(monkeypatch, log_sync.LogSync, "written")
    produce(device, socket, b"0")
    since = sync.unsynced_since
    assert since is not None and len(writes) == 1  # (the first write: unsynced since)
    for n in range(1, 11):
        produce(device, socket, b"%d" % n)
    assert len(writes) == 1
    assert sync.unsynced_since == since


def test_a_plain_message_past_the_room_is_refused(open_device: Callable[..., Device],
                                                  open_socket: Sockets):
    """No header, but a limit of room: looked at (``plain`` is False), and refused."""
    device = open_device("--max-messages", "2")
    socket = producer_socket(device, open_socket)
    produce(device, socket, b"1")
    produce(device, socket, b"2")
    socket.send_multipart(frames.encode_produce(b"3", [b"body"]))
    wake_until(device, lambda: bool(socket.poll(0)), "the refusal")
    assert not frames.decode_producer_ack(socket.recv_multipart()).ok
    assert device.node.store.messages == 2
