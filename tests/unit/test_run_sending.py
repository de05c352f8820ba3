"""Runs of first deliveries to consumers that take batches (pzq.serving.sending), on a
real ROUTER with ROUTER_MANDATORY and real DEALERs in the process: each consumer filled
to its credit in turn, and a pipe that refuses a batch leaves nothing half sent."""

from __future__ import annotations

import time

import pytest
import zmq

from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.first_runs import ONE_BY_ONE
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.protocol import consume as consume_wire
from pzq.protocol.message_keys import parse_message_key
from pzq.rates import LatencyWindow
from pzq.serving import sending
from pzq.serving.holding import SEQ_MASK, GroupDelivery, NamedGroupDelivery, ServedConsumer
from pzq.serving.sending import Sender
from pzq.store import record
from pzq.store.store import Store
from pzq.store.topics import Topics
from tests.support.stored import stored

pytestmark = pytest.mark.timeout(30)
TIMEOUT = 1_000_000


@pytest.fixture
def context():
    """A context destroyed after, whatever sockets the test left open."""
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


class Node:
    """A group's delivery state and consumers behind one ROUTER, as the consume endpoint
    has them; ``deliver`` is its pass over the state."""

    def __init__(self, store: Store, context: zmq.Context, inflight_size: int = 1 << 30) -> None:
        self.context = context
        self.router = context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.router.setsockopt(zmq.SNDHWM, 2)
        self.router.bind("inproc://consume")
        self.state = DeliveryState(OwnArea(store), DeliverySettings(TIMEOUT, inflight_size),
                                   Counters())
        self.state.run_at_least = 1  # runs of any length: each edge with a few messages
        store.register(self.state)
        self.group = GroupDelivery("g", self.state, dict, LatencyWindow(), "t")
        self.sender = Sender(self.router)
        self.dealers: dict[bytes, zmq.Socket] = {}

    def consumer(self, name: bytes, window: int) -> ServedConsumer:
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, name)
        dealer.setsockopt(zmq.RCVHWM, 1)
        dealer.connect("inproc://consume")
        dealer.send(b"hello")
        assert self.router.recv_multipart() == [name, b"hello"]
        self.dealers[name] = dealer
        consumer = ServedConsumer(name, self.group, window, 0.0, batches=True,
                                  head=consume_wire.deliver_head(name, b"t", b"g", 2))
        self.group.consumers.append(consumer)
        return consumer

    def deliver(self, now_us: int, limit: int) -> int:
        outlets = self.sender.for_group(self.group, self.state, now_us)
        assert outlets.run is not ONE_BY_ONE  # the runs are what is tested here
        sent = self.state.deliver_raw(outlets.each, now_us, limit, outlets.run)
        self.sender.finish()
        return sent

    def received(self, name: bytes) -> list[list[int]]:
        """The seqs of each BATCH the consumer has waiting (every message a whole one)."""
        batches, dealer = [], self.dealers[name]
        while dealer.poll(0):
            message = consume_wire.decode_node_message(dealer.recv_multipart())
            assert message.verb == consume_wire.BATCH
            batches.append([parse_message_key(key)[1] for key, _, _ in message.entries])
        return batches

    def fill_pipe(self, name: bytes, leaving: int = 0) -> int:
        """Fillers to the consumer until its pipe refuses one, less ``leaving`` (a pipe
        of the same size as measured first on another consumer); how many went."""
        sent = 0
        try:
            while True:
                self.router.send_multipart([name, b"filler"], zmq.NOBLOCK)
                sent += 1
                if leaving and sent == leaving:
                    return sent
        except zmq.Again:
            return sent

    def drain_fillers(self, name: bytes, count: int) -> None:
        for _ in range(count):
            assert self.dealers[name].recv_multipart() == [b"filler"]


def test_a_run_fills_each_consumer_to_its_credit_in_turn(store, context):
    node = Node(store, context)
    first, second = node.consumer(b"A", 3), node.consumer(b"B", 4)
    seqs = stored_of_topic_t(store, 10)
    assert node.deliver(100, 2) == 2  # B's turn first: it holds two
    assert node.received(b"B") == [seqs[:2]] and second.held == set(seqs[:2])  # own: seqs
    assert node.deliver(200, 8) == 5  # then A's turn: 3, and B's credit left, 2
    assert node.received(b"A") == [seqs[2:5]] and node.received(b"B") == [seqs[5:7]]
    assert len(first.held) == 3 and len(second.held) == 4
    assert {key: consumer.routing_id for key, consumer in node.group.holders().items()} == {
        **{seq: b"B" for seq in seqs[:2] + seqs[5:7]}, **{seq: b"A" for seq in seqs[2:5]}}
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs[:7]
    assert node.state.cursor == seqs[6] + 1 and node.sender.blocked


def test_a_groups_held_keys_are_the_own_seqs_and_tell_every_other_origin_apart(store, context):
    """The own messages' keys are their seqs (a run's list as it is); another origin's,
    its node id's number plus one above the seq, so a node id of 0 is not the own."""
    group = Node(store, context).group
    own, zero, top = store.node_id, b"00000000", b"ffffffff"
    seqs = [0, 7, 2**64 - 1]
    assert group.keys_of(own, seqs) is seqs and [group.key_of(own, seq) for seq in seqs] == seqs
    others = [group.key_of(node_id, seq) for node_id in (zero, top) for seq in seqs]
    assert others == [*group.keys_of(zero, seqs), *group.keys_of(top, seqs)]
    assert len({*seqs, *others}) == 9 and group.keys_of(zero, [5]) == [1 << 64 | 5]
    assert [(group.origin_of(key), key & SEQ_MASK) for key in [*seqs, *others]] == [
        (node_id, seq) for node_id in (own, zero, top) for seq in seqs]
    assert group.base_of(int(own, 16)) == 0 and group.base_of(0) | 5 == group.key_of(zero, 5)


def test_a_run_stops_at_the_in_flight_bytes_and_the_rest_goes_after_acks(store, context):
    seqs = stored_of_topic_t(store, 10)
    size = len(store.get_own(seqs[0]))
    node = Node(store, context, inflight_size=6 * size)
    node.consumer(b"A", 100)
    assert node.deliver(100, 100) == 6
    assert node.received(b"A") == [seqs[:6]] and not node.state.has_work()
    batch = store.begin()
    node.state.ack_all(batch, seqs[:6])
    store.commit(batch)
    for seq in seqs[:6]:
        node.group.release((store.node_id, seq))
    assert node.deliver(200, 100) == 4
    assert node.received(b"A") == [seqs[6:]] and store.messages == 4


def test_a_refused_batch_leaves_nothing_half_sent_and_goes_later(store, context):
    node = Node(store, context)
    node.group.consumers.remove(node.consumer(b"M", 100))
    room = node.fill_pipe(b"M")  # a pipe's size, in messages
    node.consumer(b"A", 100)
    node.consumer(b"B", 100)
    seqs = stored_of_topic_t(store, 3)
    assert node.fill_pipe(b"A") == room
    # B's turn first: its pipe takes one batch of what fits in it, not the second
    node.fill_pipe(b"B", leaving=room - 1)
    big = stored_of_topic_t(store, 6, size=400_000)  # three to a batch (1 MiB)
    node.group.consumers.reverse()  # A's turn first now: it refuses, so B gets them
    assert node.deliver(100, 100) == 6  # B: seqs and three big ones; A nothing
    node.drain_fillers(b"B", room - 1)
    node.drain_fillers(b"A", room)
    assert node.received(b"B") == [seqs + big[:3]] and node.received(b"A") == []
    assert node.state.cursor == big[2] + 1 and node.sender.blocked
    sent, deadline = 0, time.monotonic() + 10
    while sent < 3 and time.monotonic() < deadline:
        node.router.getsockopt(zmq.EVENTS)  # the reads come through: the pipes take more
        sent += node.deliver(200, 100)
    received = node.received(b"A") + node.received(b"B")
    assert sent == 3 and [seq for batch in received for seq in batch] == big[3:]
    assert sorted(entry.seq for entry in node.state.inflight.entries()) == seqs + big


def test_what_goes_alone_after_a_run_joins_its_consumers_batch(store, context):
    """A consumer taking batches keeps its turn after a run, as after each delivery."""
    node = Node(store, context)
    node.consumer(b"A", 10)
    node.consumer(b"B", 10)
    seqs = stored_of_topic_t(store, 4)
    batch = store.begin()  # the last was given back once: it goes alone
    node.state.area.rewrite(batch, seqs[3], record.with_bookkeeping(store.get_own(seqs[3]),
                                                                    50, 1))
    store.commit(batch)
    assert node.deliver(100, 100) == 4
    assert node.received(b"B") == [seqs] and node.received(b"A") == []


def stored_of_topic_t(store: Store, count: int, size: int = 10) -> list[int]:
    """Messages of topic t."""
    return stored(store, count, size, (b"TOPIC:t",))


def test_a_topics_groups_send_the_entries_one_of_them_made_and_make_only_the_rest(
        store, context, monkeypatch):
    """Two groups of one topic behind one ROUTER: the second sends the batch entries the
    first made for the messages both deliver (taken from the first's run, kept whole),
    and makes those of the rest; each consumer gets every message whole, its own key
    and body; a third reading the same six (another list) makes none."""
    made_seqs: list[list[int]] = []
    make = sending._batch_entries

    def making(node_id: bytes, seqs: list[int], values: list[bytes]
               ) -> tuple[list[bytes], bytes | None]:
        made_seqs.append(list(seqs))
        return make(node_id, seqs, values)

    monkeypatch.setattr(sending, "_batch_entries", making)
    topics = Topics(store, "default")
    topic = topics.topic("t", 0)
    groups = [topics.add_group(topic, name, 0, "", 0) for name in ("g1", "g2")]
    node = Node(store, context)  # (its ROUTER and sender; its own group is not used)
    seqs = stored_of_topic_t(store, 6)
    bodies = {seq: record.decode(store.get_own(seq)).parts for seq in seqs}
    for group, name, window in zip(groups, (b"A", b"B"), (4, 6), strict=True):
        state = DeliveryState(OwnArea(store), DeliverySettings(TIMEOUT, 1 << 30), Counters())
        state.run_at_least = 1
        store.register(state)
        node.state, node.group = state, NamedGroupDelivery(group, state, lambda t, g: {})
        assert node.group.shares_reads()
        node.consumer(name, window)
        assert node.deliver(100, window) == window  # (A reads four: B two more)
    for name, window in ((b"A", 4), (b"B", 6)):
        message = consume_wire.decode_node_message(node.dealers[name].recv_multipart())
        assert [(parse_message_key(key), parts) for key, _, parts in message.entries] == [
            ((store.node_id, seq), bodies[seq]) for seq in seqs[:window]]
    assert made_seqs == [seqs[:4], seqs[4:6]]  # each entry made once
    third, _ = node.sender._shared_entries(store.node_id, list(seqs),
                                           [store.get_own(seq) for seq in seqs])
    assert made_seqs == [seqs[:4], seqs[4:6]]  # (nothing made again)
    assert [parse_message_key(entry[1:1 + entry[0]]) for entry in third] == [
        (store.node_id, seq) for seq in seqs]
