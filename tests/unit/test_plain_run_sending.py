"""Runs of first deliveries sent one ZeroMQ message a delivery (pzq.serving.frame_runs):
to consumers speaking protocol 1 behind a real ROUTER with ROUTER_MANDATORY, and to the
pool behind the DEALER of --send-dsn, with real sockets in the process. Each run's frames
are those one delivery at a time sends, byte for byte; round robin and credit hold, and
a refused or unreachable pipe leaves nothing half sent and nothing lost."""

from __future__ import annotations

import time

import pytest
import zmq

from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.first_runs import ONE_BY_ONE
from pzq.delivery.framing import delivery_frames
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.protocol import consume as consume_wire
from pzq.protocol.message_keys import message_key, parse_message_key
from pzq.rates import LatencyWindow
from pzq.serving.holding import SEQ_MASK, GroupDelivery, ServedConsumer
from pzq.serving.sending import Sender
from pzq.store import record
from pzq.store.store import Store
from tests.support.stored import stored

pytestmark = pytest.mark.timeout(30)
TIMEOUT = 1_000_000


@pytest.fixture
def context():
    """A context destroyed after, whatever sockets the test left open."""
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def new_state(store: Store) -> DeliveryState:
    state = DeliveryState(OwnArea(store), DeliverySettings(TIMEOUT, 1 << 30), Counters())
    state.run_at_least = 1  # runs of any length: each edge with a few messages
    store.register(state)
    return state


def expected_frames(store: Store, seq: int, now_us: int) -> list[bytes]:
    """What one delivery at a time sends for the message (the original's layout)."""
    return delivery_frames(message_key(store.node_id, seq), store.get_own(seq), 1, now_us,
                           TIMEOUT, False)


class Group:
    """A group's consumers speaking protocol 1 behind one ROUTER, as the consume
    endpoint has them."""

    def __init__(self, store: Store, context: zmq.Context, hwm: int = 1000) -> None:
        self.store, self.context, self.hwm = store, context, hwm
        self.router = context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.router.setsockopt(zmq.SNDHWM, hwm)
        self.router.bind("inproc://consume")
        self.state = new_state(store)
        self.group = GroupDelivery("g", self.state, dict, LatencyWindow(), "t")
        self.sender = Sender(self.router)
        self.dealers: dict[bytes, zmq.Socket] = {}

    def consumer(self, name: bytes, window: int) -> ServedConsumer:
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, name)
        dealer.setsockopt(zmq.RCVHWM, self.hwm)
        dealer.connect("inproc://consume")
        dealer.send(b"hello")
        assert self.router.recv_multipart() == [name, b"hello"]
        self.dealers[name] = dealer
        consumer = ServedConsumer(name, self.group, window, 0.0,
                                  head=consume_wire.deliver_head(name, b"t", b"g", 1))
        self.group.consumers.append(consumer)
        return consumer

    def deliver(self, now_us: int, limit: int) -> int:
        outlets = self.sender.for_group(self.group, self.state, now_us)
        assert outlets.run is not ONE_BY_ONE  # the runs are what is tested here
        sent = self.state.deliver_raw(outlets.each, now_us, limit, outlets.run)
        self.sender.finish()
        return sent

    def received(self, name: bytes, now_us: int) -> list[int]:
        """The seqs of the deliveries waiting for the consumer, each checked frame by
        frame against what one delivery at a time sends."""
        seqs, dealer = [], self.dealers[name]
        while dealer.poll(0):
            frames = dealer.recv_multipart()
            assert frames[:3] == [consume_wire.DELIVER, b"t", b"g"]
            seq = parse_message_key(frames[3])[1]
            assert frames[3:] == expected_frames(self.store, seq, now_us)
            seqs.append(seq)
        return seqs


def test_a_run_goes_round_robin_one_message_a_delivery_within_each_credit(store, context):
    node = Group(store, context)
    first, second = node.consumer(b"A", 2), node.consumer(b"B", 4)
    seqs = stored(store, 10, headers=(b"TOPIC:t",))
    # B's turn first, then one each while both have credit (A: 2, B: 4)
    assert node.deliver(100, 10) == 6
    assert node.received(b"A", 100) == [seqs[1], seqs[3]]
    assert node.received(b"B", 100) == [seqs[0], seqs[2], seqs[4], seqs[5]]
    assert first.held == {seqs[1], seqs[3]}  # (the own messages' keys are their seqs)
    assert second.held == {seqs[0], seqs[2], *seqs[4:6]}
    holders = node.group.holders().items()
    assert {key & SEQ_MASK: consumer.routing_id for key, consumer in holders} == {
        seqs[1]: b"A", seqs[3]: b"A", **{seq: b"B" for seq in (seqs[0], seqs[2], *seqs[4:6])}}
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs[:6]
    assert node.state.counters.delivered == 6 and node.sender.blocked


def test_a_refused_pipe_leaves_nothing_half_sent_and_the_rest_goes_later(store, context):
    node = Group(store, context, hwm=2)
    node.consumer(b"A", 100)
    node.consumer(b"B", 100)
    seqs = stored(store, 40, headers=(b"TOPIC:t",))
    sent = node.deliver(100, 100)
    assert 0 < sent < 40 and node.sender.blocked  # the small pipes refused the rest
    got = node.received(b"A", 100) + node.received(b"B", 100)
    deadline = time.monotonic() + 10
    while len(got) < 40 and time.monotonic() < deadline:
        node.router.getsockopt(zmq.EVENTS)  # the reads come through: the pipes take more
        node.deliver(200, 100)
        got += node.received(b"A", 200) + node.received(b"B", 200)
    assert sorted(got) == seqs  # each once, whole (each checked frame by frame)
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs


def test_a_consumer_gone_mid_run_is_passed_over_and_the_others_take_the_run(store, context):
    node = Group(store, context)
    node.consumer(b"A", 100)
    gone = node.consumer(b"B", 100)
    node.consumer(b"C", 100)
    node.dealers.pop(b"B").close(linger=0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the ROUTER sees the pipe go
        try:
            node.router.send_multipart([b"B", b"probe"], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                break
        time.sleep(0.01)
    seqs = stored(store, 9, headers=(b"TOPIC:t",))
    # the run itself stops at B, says so, and leaves the rest to go one at a time
    run = node.sender.for_group(node.group, node.state, 100).run
    taken = run(store.node_id, seqs, [store.get_own(seq) for seq in seqs])
    assert taken < 9 and gone.unreachable and node.sender.found_unreachable
    for consumer in node.group.consumers:
        consumer.held.clear()
    node.received(b"A", 100), node.received(b"C", 100)
    assert node.deliver(100, 100) == 9
    assert not gone.held
    assert sorted(node.received(b"A", 100) + node.received(b"C", 100)) == seqs
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs


def test_a_run_of_messages_of_several_parts_sends_each_whole(store, context):
    node = Group(store, context)
    node.consumer(b"A", 100)
    batch = store.begin()
    seqs = [batch.add_message(record.encode(b"m%d" % i, (b"TOPIC:t",),
                                            tuple(b"p%d" % p for p in range(i % 3 + 1)), 1))
            for i in range(6)]
    store.commit(batch)
    assert node.deliver(100, 100) == 6
    assert node.received(b"A", 100) == seqs


class Pool:
    """The pool behind --send-dsn's DEALER, consumers on ROUTERs as the original's are."""

    def __init__(self, store: Store, context: zmq.Context, hwm: int = 1000) -> None:
        self.store = store
        self.dealer = context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.SNDHWM, hwm)
        self.dealer.bind("inproc://send")
        self.consumer = context.socket(zmq.ROUTER)
        self.consumer.setsockopt(zmq.RCVHWM, hwm)
        self.consumer.connect("inproc://send")
        self.state = new_state(store)
        self.group = GroupDelivery("default", self.state, dict, LatencyWindow(), "")
        self.pool = ServedConsumer(b"", self.group, window=0, last_heard=0.0, pool=True)
        self.sender = Sender(self.dealer)

    def deliver(self, now_us: int, limit: int) -> int:
        """As the send endpoint's pass over a state."""
        run = self.sender.for_pool_run(self.pool, self.state, now_us)
        assert run is not ONE_BY_ONE
        return self.state.deliver_raw(
            self.state.framing(self.sender.for_pool(self.pool), now_us), now_us, limit, run)

    def received(self, now_us: int) -> list[int]:
        seqs = []
        while self.consumer.poll(0):
            frames = self.consumer.recv_multipart()[1:]  # (the node's peer id first)
            seq = parse_message_key(frames[0])[1]
            assert frames == expected_frames(self.store, seq, now_us)
            seqs.append(seq)
        return seqs


def test_the_pool_gets_a_run_in_the_originals_frames_within_its_limit(store, context):
    node = Pool(store, context)
    deadline = time.monotonic() + 10
    while not node.dealer.getsockopt(zmq.EVENTS) & zmq.POLLOUT:  # the consumer connected
        assert time.monotonic() < deadline
        time.sleep(0.01)
    seqs = stored(store, 12, headers=(b"TOPIC:t",))
    assert node.deliver(100, 10) == 10  # the window's room
    deadline = time.monotonic() + 10
    got: list[int] = []
    while len(got) < 10 and time.monotonic() < deadline:
        got += node.received(100)
    assert got == seqs[:10] and node.state.counters.delivered == 10
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs[:10]


def test_a_full_pool_pipe_leaves_nothing_half_sent_and_the_rest_goes_later(store, context):
    node = Pool(store, context, hwm=2)
    deadline = time.monotonic() + 10
    while not node.dealer.getsockopt(zmq.EVENTS) & zmq.POLLOUT:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    seqs = stored(store, 30, headers=(b"TOPIC:t",))
    sent = node.deliver(100, 100)
    assert 0 < sent < 30 and node.sender.blocked
    got = node.received(100)
    while len(got) < 30 and time.monotonic() < deadline + 10:
        node.dealer.getsockopt(zmq.EVENTS)
        node.sender.blocked = False
        node.deliver(100, 100)
        got += node.received(100)
    assert sorted(got) == seqs
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs
