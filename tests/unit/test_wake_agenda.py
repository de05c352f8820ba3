"""The poll's timeout from the parts' agenda (pzq.agenda): a part is asked its wait
only when it said the wait may have shortened or when its last deadline came, and the
timers it tells of still wake the node on time (a node's loop on inproc endpoints,
driven wake by wake)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

import pytest
import zmq

from pzq.agenda import Agenda
from pzq.clock import Now
from pzq.delivery.expiry import FAR
from pzq.node.device import Device
from pzq.parts import Part, Parts
from pzq.protocol import frames
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store
from pzq.zmqio import Events
from tests.support.devices import producer_socket, wake
from tests.support.held_sync import HeldSync

pytestmark = pytest.mark.timeout(30)

Sockets = Callable[[int], zmq.Socket]  # tests/conftest.py's open_socket: closed after

NO_BATCH = cast(Batch, SimpleNamespace(operations=0))  # (a take that writes nothing)


class Timer:
    """Something with a wait, which counts how often it is asked."""

    def __init__(self, wait_ms: int | None) -> None:
        self.wait_ms = wait_ms
        self.asked = 0

    def timeout_ms(self, now: Now) -> int | None:
        self.asked += 1
        return self.wait_ms


def test_an_entry_is_asked_when_it_changed_or_its_deadline_came():
    agenda, idle, timed = Agenda(), Timer(None), Timer(50)
    agenda.keep(idle)
    agenda.keep(timed)
    assert agenda.timeout_ms(Now(0, 100.0)) == 50  # both asked once, at the first wake
    assert (idle.asked, timed.asked) == (1, 1)
    idle.wait_ms = 5  # not told: not asked
    assert agenda.timeout_ms(Now(0, 100.02)) == 30
    assert (idle.asked, timed.asked) == (1, 1)
    agenda.changed(idle)  # told: asked again, and only it
    assert agenda.timeout_ms(Now(0, 100.02)) == 5
    assert (idle.asked, timed.asked) == (2, 1)
    idle.wait_ms = None
    assert agenda.timeout_ms(Now(0, 100.03)) == 20  # idle's deadline came: asked (None)
    assert (idle.asked, timed.asked) == (3, 1)
    timed.wait_ms = None  # a wait that grows is found at the old deadline
    assert agenda.timeout_ms(Now(0, 100.05)) is None
    assert (idle.asked, timed.asked) == (3, 2)
    assert agenda.timeout_ms(Now(0, 200.0)) is None  # nothing to ask any more
    assert (idle.asked, timed.asked) == (3, 2)


def produce(device: Device, socket: zmq.Socket, *headers: bytes) -> None:
    """One message, stored and ACKed."""
    socket.send_multipart(frames.encode_produce(b"1", [b"x"], (b"TOPIC:t", *headers)))
    for _ in range(100):
        wake(device, 10)
        if socket.poll(0):
            assert frames.decode_producer_ack(socket.recv_multipart()).ok
            return
    raise AssertionError("no ACK within 100 wakes")


def wake_on_own_timeout(device: Device, done: Callable[[], bool], seconds: float) -> float:
    """Wakes as the node's loop does, each poll as long as the node's own timeout (an
    idle node that has none would wait for ever: that fails here); how long it took."""
    began = time.monotonic()
    while not done():
        timeout = device.poll_timeout_ms(Now.read())
        assert timeout is not None, "nothing would wake the node"
        wake(device, timeout)
        assert time.monotonic() - began < seconds, "not on time"
    return time.monotonic() - began


def settle(device: Device) -> None:
    """The first wakes ask every part once and read whatever the monitors hold."""
    for _ in range(3):
        wake(device, 0)


def test_the_timed_fsync_wakes_an_idle_node(open_device: Callable[..., Device],
                                             open_socket: Sockets):
    device = open_device("--sync-interval", "300ms")
    log_sync = device.node.store.log_sync
    socket = producer_socket(device, open_socket)
    settle(device)
    assert device.poll_timeout_ms(Now.read()) is None  # nothing owed, no timer
    produce(device, socket)
    assert log_sync.unsynced_since is not None
    assert 0 < (device.poll_timeout_ms(Now.read()) or 0) <= 300
    took = wake_on_own_timeout(device, lambda: log_sync.unsynced_since is None, 2.0)
    assert took < 1.0
    assert device.poll_timeout_ms(Now.read()) is None  # synced: no timer left


def test_the_loop_serves_while_the_timed_sync_is_held_up(open_device: Callable[..., Device],
                                                         open_socket: Sockets):
    device = open_device("--sync-interval", "100ms")
    store = device.node.store
    held = HeldSync(store)
    socket = producer_socket(device, open_socket)
    settle(device)
    produce(device, socket)
    wake_on_own_timeout(device, held.started.is_set, 2.0)  # the sync began, and hangs
    second = Now.read().mono
    produce(device, socket)  # a round trip meanwhile: stored and ACKed
    assert store.log_syncs == 0 and (store.log_sync.unsynced_since or second) < second
    held.release()
    # an idle node wakes to take the outcome; the second message waits for the next
    wake_on_own_timeout(device, lambda: store.log_syncs == 1, 2.0)
    assert (store.log_sync.unsynced_since or 0) >= second
    wake_on_own_timeout(device, lambda: store.log_sync.unsynced_since is None, 2.0)
    assert store.log_syncs == 2
    assert device.poll_timeout_ms(Now.read()) is None


def test_a_scheduled_message_wakes_an_idle_node_when_due(open_device: Callable[..., Device],
                                                         open_socket: Sockets):
    device = open_device("--sync-interval", "0")  # no timed fsync to wake it meanwhile
    scheduled = device.node.scheduled
    socket = producer_socket(device, open_socket)
    settle(device)
    assert device.poll_timeout_ms(Now.read()) is None
    produce(device, socket, b"DELAY:200")
    assert scheduled.waiting == 1
    assert 0 < (device.poll_timeout_ms(Now.read()) or 0) <= 200
    took = wake_on_own_timeout(device, lambda: scheduled.waiting == 0, 2.0)
    assert 0.1 < took < 1.0
    assert device.node.store.messages == 1  # released into the store


def test_a_wake_with_nothing_changed_asks_no_part_its_wait(open_device: Callable[..., Device],
                                                           open_socket: Sockets):
    """With producers at work, the parts that tell their waits are asked none at a
    wake that changed none (a scheduled message's wait asked once, when stored)."""
    device = open_device("--sync-interval", "0", roles=("receive", "send", "monitor",
                                                        "consume"))
    socket = producer_socket(device, open_socket)
    settle(device)
    produce(device, socket)  # the log's first write since the start: a sync owed (none)
    device.poll_timeout_ms(Now.read())
    asked: list[str] = []
    for part in device.parts:
        if part.tells_wait:
            timeout_ms = part.timeout_ms

            def counted(now: Now, part_timeout: Callable[[Now], int | None] = timeout_ms,
                        name: str = type(part).__name__) -> int | None:
                asked.append(name)
                return part_timeout(now)
            part.timeout_ms = counted  # type: ignore[method-assign]
    assert len([part for part in device.parts if part.tells_wait]) >= 6
    for _ in range(5):
        produce(device, socket)
    device.poll_timeout_ms(Now.read())
    assert asked == []
    produce(device, socket, b"DELAY:60000")
    assert device.poll_timeout_ms(Now.read()) is not None
    assert asked == ["ScheduledRelease"]


class Lane(Participant):
    """A participant that keeps ``idle``: given work by ``owe``, done once written."""

    def __init__(self) -> None:
        self.idle = True
        self.steps: list[str] = []

    def owe(self) -> None:
        self.idle = False

    def prepare(self, batch: Batch) -> None:
        self.steps.append("prepare")

    def written(self) -> None:
        self.steps.append("written")
        self.idle = True


def test_a_batch_asks_an_idle_participant_nothing(store: Store):
    lane = Lane()
    store.register(lane)
    store.commit(store.begin())
    assert lane.steps == []
    batch = store.begin()
    lane.owe()  # given work in the wake: the batch's write is told
    store.commit(batch)
    assert lane.steps == ["written"]
    lane.owe()  # given work for the next batch: prepared and told
    store.commit(store.begin())
    assert lane.steps == ["written", "prepare", "written"]
    store.commit(store.begin())
    assert lane.steps == ["written", "prepare", "written"]


def test_the_store_participants_given_work_in_a_wake_write_it(
        open_device: Callable[..., Device], open_socket: Sockets):
    """Each participant that keeps ``idle`` is idle at rest, is not once a message
    gives it work, and is again after the write (its work done: the dedup id is
    remembered, the scheduled message counted, the expiry tracked)."""
    device = open_device("--sync-interval", "0")
    node = device.node
    idle_ones = [node.dedup, node.scheduled, node.expiry, node.lanes]
    socket = producer_socket(device, open_socket)
    settle(device)
    assert all(part.idle for part in idle_ones)
    produce(device, socket, b"DEDUP-ID:a", b"TTL:60000")
    produce(device, socket, b"DELAY:60000")
    assert all(part.idle for part in idle_ones)
    topic_id = node.topics.topics["t"].id
    assert node.dedup.seen_at(topic_id, b"a") is not None
    assert not node.dedup.in_batch(topic_id, b"a")  # written: no longer in a batch
    assert node.scheduled.waiting == 1
    assert node.expiry.soonest_us < FAR


def test_a_resting_part_is_not_asked_at_its_step_until_it_asks():
    parts = Parts()

    class Taker(Part):
        def __init__(self) -> None:
            self.taken = 0

        def take(self, events: Events, batch: Batch, now: Now) -> None:
            self.taken += 1

    first, second = Taker(), Taker()
    parts.add(first)
    parts.add(second)
    parts.agenda.rest(first, "take")
    parts.take({}, NO_BATCH, Now(0, 1.0))
    assert (first.taken, second.taken) == (0, 1)
    parts.agenda.ask(first, "take")
    parts.take({}, NO_BATCH, Now(0, 1.0))
    assert (first.taken, second.taken) == (1, 2)
    assert list(parts) == [first, second]  # (asked in the loop's order again)
    parts.agenda.rest(first, "take", until_input=7)  # a quiet socket's descriptor
    parts.take({}, NO_BATCH, Now(0, 1.0))
    assert (first.taken, second.taken) == (1, 3)
    parts.take({7: zmq.POLLIN}, NO_BATCH, Now(0, 1.0))  # its input: asked
    assert (first.taken, second.taken) == (2, 4)


def test_a_rest_or_an_ask_looks_at_no_part_class_again(monkeypatch: pytest.MonkeyPatch):
    """Which parts do something at a step is known once they are added: the rests and
    asks of a wake (the reaper's tick asks and rests the expiry sweep) only re-sort."""
    parts = Parts()

    class Taker(Part):
        def take(self, events: Events, batch: Batch, now: Now) -> None:
            pass

    first, second = Taker(), Taker()
    parts.add(first)
    parts.add(second)
    looked: list[str] = []
    monkeypatch.setattr("pzq.parts.overriding",
                        lambda objects, base, step: looked.append(step) or [])
    parts.agenda.rest(first, "take")
    parts.agenda.ask(first, "take")
    parts.agenda.rest(second, "answer")
    assert looked == []
    assert [part for part, _ in parts._take] == [first, second]


def test_a_wake_with_producers_at_work_asks_no_idle_part(open_device: Callable[..., Device],
                                                        open_socket: Sockets):
    """The scheduled release, the replays, the backfill and the backup rest while
    they have nothing, and the monitor and ``--send-dsn``'s connection count until
    their descriptors fire: a produce wake asks none of them; a scheduled message
    stored puts the release's take back in the wake, a request the monitor's answer,
    a message's expiry the sweep's take when it comes."""
    device = open_device("--sync-interval", "0", roles=("receive", "send", "monitor",
                                                        "consume"))
    socket = producer_socket(device, open_socket)
    settle(device)
    asked: list[str] = []
    watched = {"ScheduledRelease": "take", "Replays": "finish", "NodeUpkeep": "send_out",
               "Backups": "answer", "Monitor": "answer", "SendEndpoint": "answer",
               "ExpirySweep": "take"}
    for part in device.parts:
        step = watched.get(type(part).__name__)
        if step is not None:
            method = getattr(part, step)

            def counted(*args: object, method: Callable[..., None] = method,
                        name: str = type(part).__name__) -> None:
                asked.append(name)
                method(*args)
            setattr(part, step, counted)
    assert len(asked) == 0
    for _ in range(5):
        produce(device, socket)
    assert asked == []
    produce(device, socket, b"DELAY:60000")
    wake(device, 0)
    assert "ScheduledRelease" in asked
    monitor = open_socket(zmq.DEALER)
    monitor.connect(device.bound()["monitor"])
    monitor.send_multipart([b"PING"])
    for _ in range(100):
        wake(device, 10)
        if monitor.poll(0):
            break
    assert monitor.recv_multipart()[-1] == b"PONG"
    assert "Monitor" in asked and "ExpirySweep" not in asked
    produce(device, socket, b"TTL:100")  # the sweep asked when it is due, on its own wait
    wake_on_own_timeout(device, lambda: "ExpirySweep" in asked, 2.0)
    assert device.node.expiry.soonest_us >= FAR  # swept
