"""A named group's priority lanes over a real store, in process: a lane message goes
out ahead of the cursor, so no delivered-below mark covers it, and what the group
knows of it must hold as well as for a message the cursor met (found by the group
model, tests/unit/test_group_model.py)."""

from __future__ import annotations

from pathlib import Path

from pzq.admin import group_ops
from pzq.counters import Counters
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.groups import GroupArea
from pzq.delivery.lanes import Lanes
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.protocol import frames as wire
from pzq.protocol.message_keys import parse_message_key
from pzq.store import keyspace, record
from pzq.store.store import Store
from pzq.store.topics import Group, Topics

SETTINGS = DeliverySettings(ack_timeout_us=1_000_000, inflight_size=1 << 20,
                            with_headers=True)
NOW_US = 1_000_000_000


class Node:
    """A store with its topics and lanes; ``orders`` has priorities and a group ``g``
    beside ``default``, which keeps every message (so a seek back finds them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = Store.open(path)
        self.topics = Topics(self.store, "default")
        self.store.register(self.topics)
        self.lanes = Lanes(self.store, self.topics)
        self.store.register(self.lanes)
        if "orders" not in self.topics.topics:
            batch = self.store.begin()
            orders = self.topics.topic("orders", 0)
            orders.priorities = True
            self.topics.changed(orders)
            self.topics.keep_default(orders)
            self.topics.add_group(orders, "g", 0, "", 0)
            self.store.commit(batch)
        self.group: Group = self.topics.topics["orders"].groups["g"]
        self.state = DeliveryState(GroupArea(self.store, self.topics, self.group), SETTINGS,
                                   Counters(), lanes=self.lanes.for_topic(self.group.topic))
        self.store.register(self.state)

    def reopen(self) -> Node:
        self.store.close()
        return Node(self.path)

    def produce(self, priorities: list[int]) -> list[int]:
        batch = self.store.begin()
        topic = self.topics.topics["orders"]
        seqs = []
        for priority in priorities:
            headers = (b"TOPIC:orders", *([b"PRIORITY:%d" % priority] if priority else []))
            value = record.encode(b"id", headers, (b"body",), NOW_US)
            seq = batch.add_message(value)
            if priority:
                self.lanes.add(batch, topic, priority, seq)
            self.topics.note_new(batch, seq, topic, b"", len(value))
            seqs.append(seq)
        self.store.commit(batch)
        return seqs

    def deliver(self, credits: int) -> list[tuple[int, int]]:
        """(seq, DELIVERY:n) of each message sent."""
        return counts_sent(self.state, credits)

    def ack(self, seqs: list[int]) -> None:
        batch = self.store.begin()
        for seq in seqs:
            assert self.state.ack(batch, seq) is not None
        self.store.commit(batch)

    def seek(self, target: int) -> None:
        """SEEK GROUP as the node runs it: in a batch, then the state let go below."""
        batch = self.store.begin()
        group_ops.seek(self.store, self.topics, batch, self.group, target)
        self.store.commit(batch)
        for entry in [*self.state.inflight.entries(), *self.state.ready.entries(),
                      *self.state.delayed.entries()]:
            if entry.seq < target:
                self.state.forget(entry.seq)
        self.state.rewind()

    def count_keys(self) -> list[int]:
        return [keyspace.seq_at_end(key) for key, _ in
                self.store.iterate(keyspace.group_count_prefix(self.group.id), values=False)]


def test_a_lane_message_seeked_past_and_back_comes_again_counted_2(tmp_path):
    """Out at a consumer, seeked past (a batch had written its first delivery), then
    seeked back: it came again as DELIVERY:1 (the seek deleted the count, the only
    record that it went out)."""
    node = Node(tmp_path / "db")
    *_, urgent = node.produce([0, 0, 0, 9])
    assert node.deliver(1) == [(urgent, 1)]
    node.seek(urgent + 1)
    node.seek(0)
    assert (urgent, 2) in node.deliver(10)
    node.store.close()


def test_an_acked_lane_message_comes_again_counted_2_after_a_restart_and_a_seek_back(
        tmp_path):
    """groups.rst: a message the group had ACKed comes again counted 2 after a seek
    back; a lane message's ACK deleted its count, so after a restart it came as 1."""
    node = Node(tmp_path / "db")
    *_, urgent = node.produce([0, 0, 9])
    assert node.deliver(1) == [(urgent, 1)]
    node.ack([urgent])
    node = node.reopen()
    node.seek(0)
    assert node.deliver(10)[0] == (urgent, 2)  # and first again: its lane
    node.store.close()


def test_a_lane_message_goes_first_again_after_a_seek_back_in_the_same_run(tmp_path):
    """The lanes' walk remembered the message as passed; a seek back that makes it the
    group's again must serve it from its lane, ahead of the backlog."""
    node = Node(tmp_path / "db")
    first, *_, urgent = node.produce([0, 0, 9])
    assert node.deliver(1) == [(urgent, 1)]
    node.ack([urgent])
    assert [seq for seq, _ in node.deliver(10)] == [first, first + 1]
    node.ack([first, first + 1])
    node.seek(0)
    assert node.deliver(10) == [(urgent, 2), (first, 2), (first + 1, 2)]
    node.store.close()


def test_a_kept_count_goes_once_the_cursor_passed_the_message(tmp_path):
    """The count of an ACKed lane message stays only while no delivered-below mark
    covers it: once the group's first deliveries went past it, it is deleted."""
    node = Node(tmp_path / "db")
    first, *_, urgent = node.produce([0, 0, 9])
    assert node.deliver(1) == [(urgent, 1)]
    node.ack([urgent])
    assert node.count_keys() == [urgent]
    assert [seq for seq, _ in node.deliver(10)] == [first, first + 1]
    node.ack([first, first + 1])
    node.store.commit(node.store.begin())  # the mark past them, and the count's delete
    assert node.group.delivered_below > urgent
    assert node.count_keys() == []
    node.store.close()


def default_of(node: Node) -> DeliveryState:
    state = DeliveryState(DefaultArea(node.store, node.topics), SETTINGS, Counters(),
                          lanes=node.lanes)
    node.store.register(state)
    return state


def counts_sent(state: DeliveryState, credits: int) -> list[tuple[int, int]]:
    """(seq, DELIVERY:n) of each message the state sent."""
    sent: list[tuple[int, int]] = []

    def send(frames: list[bytes]) -> bool:
        count = wire.decode_delivery([b"consumer", *frames]).deliveries
        assert count is not None
        sent.append((parse_message_key(frames[0])[1], count))
        return True
    state.deliver(send, NOW_US, credits)
    return sent


def test_default_counts_a_lane_message_on_across_a_restart(tmp_path):
    """``default``'s counts live in the stored record: a lane message it delivered
    ahead of its cursor comes again after a restart counted 2."""
    node = Node(tmp_path / "db")
    *_, urgent = node.produce([0, 9])
    assert counts_sent(default_of(node), 1) == [(urgent, 1)]
    node.store.commit(node.store.begin())
    node = node.reopen()
    assert counts_sent(default_of(node), 10)[0] == (urgent, 2)
    node.store.close()
