"""A named group's delivery state against a small model, over a real store: random
produce, deliveries with any credit (one at a time, or in runs of first deliveries
taken in part or whole), ACKs in any order, NACKs, expiry, restarts, DONEs
from a peer and ``default`` acking beside the group. After every step, no message the
group still wants is unreachable: the live state has it out, waiting, or ahead of its
cursor, and a restart now (a fresh read from the group's floor) would deliver it. A
delivery count never falls: within a run it grows by one a delivery, and once a batch
was written after a delivery it grows across a restart too.

The group's filter is drawn: ``eu-*`` or none (every tag; the read that takes the
log without a look at each tag). The topic's ``default`` rule (what --send-dsn holds
beside the group) is drawn: ``unclaimed`` (the messages the group's filter leaves),
``all`` or ``none``, and an operator may declare ``default`` on an ``unclaimed``
topic midway (``all`` from the next message on). Before and after every restart
``default`` is given exactly what the rule says it holds, and the peers holding
copies are told the same (TOPICS).

Time: some messages carry a TTL. One that has expired is never delivered, to the
group or to ``default``, whether the sweep found it first (at a step of its own) or a
delivery meets it; one out at a consumer when it expires keeps its ACK; after a
restart the sweep finds what is left. An expired message is no longer wanted.

Priorities: the topic has ``priorities=on`` and some messages a PRIORITY; the lanes
they are served from first keep every promise above (nothing delivered twice while
out, nothing the group wants left unreachable)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from pzq.admin import group_ops
from pzq.counters import Counters
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.expiry import MessageExpiry
from pzq.delivery.first_runs import ONE_BY_ONE
from pzq.delivery.groups import GroupArea
from pzq.delivery.lanes import Lanes, TopicLanes
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.node.state import who_reads
from pzq.protocol import frames as wire
from pzq.protocol.message_keys import parse_message_key
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.store import record
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import DEFAULT_ALL, DEFAULT_NONE, DEFAULT_UNCLAIMED, Group, Topics

# PZQ_MODEL_EXAMPLES raises the count for a long run (the suite's takes seconds).
EXAMPLES = int(os.environ.get("PZQ_MODEL_EXAMPLES", "60"))
pytestmark = pytest.mark.timeout(110 * max(1, EXAMPLES // 60))

ACK_TIMEOUT_US = 1_000_000
SETTINGS = DeliverySettings(ack_timeout_us=ACK_TIMEOUT_US, inflight_size=1 << 20,
                            with_headers=True, backoff_us=(ACK_TIMEOUT_US // 2,))
EVERYTHING = 1 << 30  # credits and bytes of a probe that takes all it finds
TAGS = st.sampled_from([b"eu-west", b"eu-north", b"us"])  # the group takes eu-* (or all)
TTLS_MS = st.one_of(st.none(), st.integers(1, 3000))  # most messages have none
PRIORITIES = st.one_of(st.none(), st.integers(0, 9))
RULES = st.sampled_from([DEFAULT_UNCLAIMED, DEFAULT_ALL, DEFAULT_NONE])


def seq_of(frames: list[bytes]) -> int:
    return parse_message_key(frames[0])[1]


def count_of(frames: list[bytes]) -> int:
    count = wire.decode_delivery([b"consumer", *frames]).deliveries
    assert count is not None
    return count


class GroupModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.path = Path(tempfile.mkdtemp(prefix="pzq-model-"))
        self.now_us = 1_000_000_000
        self.tags: dict[int, bytes] = {}  # every message stored, with its tag
        self.done: set[int] = set()  # what the group is done with (ACKed, peer's DONE)
        self.out: set[int] = set()  # the group's deliveries not yet answered
        self.deadlines: dict[int, int] = {}  # when each of those goes back (µs)
        self.default_done: set[int] = set()
        self.gone: set[int] = set()  # deleted: every group holding it was done with it
        self.rule = DEFAULT_UNCLAIMED  # ``default``'s rule (drawn in ``declare``)
        self.pattern = "eu-*"  # the group's filter (drawn in ``declare``)
        self.default_from = 0  # with ``all``: every message from here on is default's
        # Delivery counts: the last one seen, those a batch has written since, and the
        # messages delivered since the last restart.
        self.counts: dict[int, int] = {}
        self.durable: dict[int, int] = {}
        self.this_run: set[int] = set()
        self.expires: dict[int, int] = {}  # messages with a TTL: when they expire (µs)
        self.priorities: dict[int, int] = {}  # messages with a PRIORITY above 0

    # -- the real parts -------------------------------------------------------------

    def _open(self) -> None:
        self.store = Store.open(self.path / "db")
        self.topics = Topics(self.store, "default")
        self.store.register(self.topics)
        self.expiry = MessageExpiry(self.store, self.topics, Counters())
        self.store.register(self.expiry)
        self.lanes = Lanes(self.store, self.topics)
        self.store.register(self.lanes)
        self.group: Group = self.topics.topics["orders"].groups["g"]
        self.state = self._state(GroupArea(self.store, self.topics, self.group),
                                 self.lanes.for_topic(self.group.topic))
        self.default = self._state(DefaultArea(self.store, self.topics), self.lanes)

    def _state(self, area: GroupArea | DefaultArea, lanes: Lanes | TopicLanes) -> DeliveryState:
        state = DeliveryState(area, SETTINGS, Counters(), expiry=self.expiry, lanes=lanes)
        self.store.register(state)
        return state

    @initialize(rule=RULES, everything=st.booleans())
    def declare(self, rule: str, everything: bool) -> None:
        store = Store.open(self.path / "db")
        topics = Topics(store, "default")
        store.register(topics)
        batch = store.begin()
        orders = topics.topic("orders", 0)
        orders.priorities = True
        topics.changed(orders)
        if rule == DEFAULT_ALL:
            topics.keep_default(orders)  # ``default`` acks beside the group
        elif rule == DEFAULT_NONE:
            orders.remove_default()
            topics.changed(orders)
        self.pattern = "" if everything else "eu-*"  # no filter: the group takes all
        topics.add_group(orders, "g", 0, self.pattern, 0)
        store.commit(batch)
        store.close()
        self.rule = rule
        self._open()

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def _commit(self, batch: Batch) -> None:
        """A batch written: with it the counts of every delivery before it."""
        self.store.commit(batch)
        self.durable.update({seq: self.counts[seq] for seq in self.this_run})

    def priority_order(self, seq: int) -> tuple[int, int]:
        """A fresh state's order: the highest priority first, then arrival."""
        return -self.priorities.get(seq, 0), seq

    def expired(self, seq: int) -> bool:
        return seq in self.expires and self.expires[seq] <= self.now_us

    def takes(self, tag: bytes) -> bool:
        """Whether the group's filter takes the tag (eu-*, or every tag without one)."""
        return not self.pattern or tag.startswith(b"eu-")

    def wanted(self) -> set[int]:
        """What the group must still deliver: its topic's messages its filter takes,
        not done and not expired."""
        return {seq for seq, tag in self.tags.items()
                if self.takes(tag) and seq not in self.done and not self.expired(seq)}

    def default_holds(self, seq: int) -> bool:
        """Whether ``default`` holds the message, by its rule."""
        unclaimed = not self.takes(self.tags[seq])
        if self.rule == DEFAULT_ALL:
            return unclaimed or seq >= self.default_from
        return self.rule == DEFAULT_UNCLAIMED and unclaimed

    def default_wanted(self) -> set[int]:
        """What ``default`` must still deliver: what it holds and is not done with."""
        return {seq for seq in self.tags if self.default_holds(seq)
                and seq not in self.default_done and not self.expired(seq)}

    def _let_go(self, seqs: set[int]) -> None:
        """Messages a holder is done with: deleted once every holder is."""
        for seq in seqs:
            group_done = seq in self.done or not self.takes(self.tags[seq])
            if group_done and (seq in self.default_done or not self.default_holds(seq)):
                self.gone.add(seq)

    # -- what producers, consumers and peers do --------------------------------------

    @rule(messages=st.lists(st.tuples(TAGS, TTLS_MS, PRIORITIES), min_size=1, max_size=40))
    def produce(self, messages: list[tuple[bytes, int | None, int | None]]) -> None:
        batch = self.store.begin()
        topic = self.topics.topic("orders", self.now_us)
        added, expiring = [], {}
        for tag, ttl_ms, priority in messages:
            headers = (b"TOPIC:orders", b"TAG:" + tag,
                       *([b"TTL:%d" % ttl_ms] if ttl_ms is not None else []),
                       *([b"PRIORITY:%d" % priority] if priority is not None else []))
            value = record.encode(b"id", headers, (b"body",), self.now_us)
            seq = batch.add_message(value)
            if ttl_ms is not None:
                expiring[seq] = self.now_us + ttl_ms * 1000
                self.expiry.track(batch, expiring[seq], seq)
            if priority:
                self.lanes.add(batch, topic, priority, seq)
                self.priorities[seq] = priority
            self.topics.note_new(batch, seq, topic, tag, len(value))
            added.append((seq, tag))
        self._commit(batch)
        self.tags.update(added)
        self.expires.update(expiring)

    @rule(advance_ms=st.integers(0, 2000))
    def sweep(self, advance_ms: int) -> None:
        """Time passes and the node's sweep runs (pzq.node.expiry_sweep): each expired
        message to every state, which lets it go unless it is out; written with the
        next batch."""
        self.now_us += advance_ms * 1000
        batch = self.store.begin()
        for key, seq in self.expiry.due(self.now_us, 1000):
            value = self.store.get_own(seq)
            if value is None:
                batch.delete(key)
                continue
            for state in (self.default, self.state):
                state.expire(seq, value, self.expiry.fate(self.topics.topics["orders"]))
            self.expiry.lingering.add(seq)
        self.expiry.gone(batch)
        self._commit(batch)
        self._commit(self.store.begin())

    @rule(credits=st.integers(1, 60), run_at_most=st.none() | st.integers(0, 60))
    def deliver(self, credits: int, run_at_most: int | None) -> None:
        """One at a time, or with runs of first deliveries taken up to ``run_at_most``
        each (as consumers taking batches do)."""
        sent: list[tuple[int, int]] = []

        def send_run(node_id: bytes, seqs: list[int], values: list[bytes]) -> int:
            taken = min(len(seqs), run_at_most or 0)
            sent.extend((seq, 1) for seq in seqs[:taken])
            return taken

        self.state.run_at_least = 1  # runs of any length, so that every edge shows
        each = self.state.framing(
            lambda frames: sent.append((seq_of(frames), count_of(frames))) or True, self.now_us)
        self.state.deliver_raw(each, self.now_us, credits,
                               ONE_BY_ONE if run_at_most is None else send_run)
        assert len(sent) <= credits
        for seq, count in sent:
            assert not self.expired(seq), f"delivered {seq}, expired at {self.expires[seq]}"
            assert seq in self.wanted(), f"delivered {seq}, which the group is done with"
            assert seq not in self.out, f"delivered {seq} while it was out already"
            assert count > self.durable.get(seq, 0), f"{seq}: count {count} after a batch"
            if seq in self.this_run:
                assert count == self.counts[seq] + 1, f"{seq}: count {count} in one run"
            self.counts[seq] = count
            self.this_run.add(seq)
        self.out.update(seq for seq, _ in sent)
        self.deadlines.update((seq, self.now_us + ACK_TIMEOUT_US) for seq, _ in sent)

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        """Any of the deliveries out, in any order, in one batch."""
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.out)), min_size=1,
                                    unique=True))
        batch = self.store.begin()
        self._acks(self.state, batch, chosen, data)
        self._commit(batch)
        self.out.difference_update(chosen)
        self.done.update(chosen)
        self._let_go(set(chosen))

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def nack(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.out)))
        assert self.state.nack(seq)
        self.out.discard(seq)

    @rule(late=st.booleans())
    def reap(self, late: bool) -> None:
        """The reaper, as the node runs it: expired deliveries back (those whose ack
        timeout passed, also while the sweep moved the clock on), the floor raised
        (written with the next batch)."""
        self.now_us += ACK_TIMEOUT_US + 1 if late else 1000
        expired = self.state.reap(self.now_us)
        self.default.reap(self.now_us)
        back = {seq for seq in self.out if self.deadlines[seq] <= self.now_us}
        assert expired == len(back), f"{expired} deliveries back, {sorted(back)} due"
        self.out -= back
        self.topics.counts.raise_floor(self.group, self.state.lowest_open())
        self._commit(self.store.begin())

    @precondition(lambda self: self.wanted() - self.out)
    @rule(data=st.data())
    def peer_done(self, data: st.DataObject) -> None:  # (an expired one: not wanted)
        """A node that took these messages over while this one was down says the
        group finished them there (a DONE frame): each done with, whether or not it
        went out here (a consumer's ACK of one never delivered would be unknown)."""
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.wanted() - self.out)),
                                    min_size=1, max_size=20, unique=True))
        batch = self.store.begin()
        for seq in chosen:
            assert self.state.done_elsewhere(batch, seq) is not None
        self._commit(batch)
        self.done.update(chosen)
        self._let_go(set(chosen))

    @staticmethod
    def _acks(state: DeliveryState, batch: Batch, chosen: list[int],
              data: st.DataObject) -> None:
        """ACKs of ``chosen`` one by one, or in bulk (one ``ack_all``, as an ACK frame
        of many keys is applied), perhaps with a key given twice (unknown the second
        time: its message is leaving)."""
        if not data.draw(st.booleans(), label="bulk"):
            for seq in chosen:
                assert state.ack(batch, seq) is not None
            return
        twice = chosen[:1] if data.draw(st.booleans(), label="a key twice") else []
        acked, finals, unknown = state.ack_all(batch, [*chosen, *twice])
        assert sorted(acked.seqs) == sorted(chosen)
        assert len(finals) == len(acked.seqs) == len(acked.sent_us)
        assert unknown == twice

    @rule(credits=st.integers(1, 60), data=st.data())
    def default_takes_and_acks(self, credits: int, data: st.DataObject) -> None:
        """``default`` (--send-dsn) reads the same messages; the last holder done
        deletes a message."""
        sent: list[int] = []
        self.default.deliver(lambda frames: sent.append(seq_of(frames)) or True,
                             self.now_us, credits)
        batch = self.store.begin()
        for seq in sent:
            assert not self.expired(seq), f"default was given {seq}, expired"
            assert seq in self.default_wanted(), (
                f"default ({self.rule}) was given {seq}, which it does not hold "
                f"or is done with")
        self._acks(self.default, batch, sent, data)
        self._commit(batch)
        self.default_done.update(sent)
        self._let_go(set(sent))

    @precondition(lambda self: self.rule == DEFAULT_UNCLAIMED)
    @rule()
    def declare_default(self) -> None:
        """An operator's DECLARE GROUP orders default: ``all`` from the next message."""
        batch = self.store.begin()
        self.topics.keep_default(self.topics.topics["orders"])
        self._commit(batch)
        self.rule, self.default_from = DEFAULT_ALL, self.store.next_seq

    @rule(data=st.data())
    def seek(self, data: st.DataObject) -> None:
        """An operator's SEEK GROUP: done below the target, to deliver from it on (what
        is still stored; one that every holder was done with is gone)."""
        target = data.draw(st.integers(0, len(self.tags)))
        batch = self.store.begin_settled()  # as the node's SEEK GROUP begins its walk
        group_ops.seek(self.store, self.topics, batch, self.group, target)
        self._commit(batch)
        state = self.state
        for entry in [*state.inflight.entries(), *state.ready.entries(),
                      *state.delayed.entries()]:
            if entry.seq < target:
                self.state.forget(entry.seq)
        self.state.rewind()
        self.out = {seq for seq in self.out if seq >= target}
        again = {seq for seq in self.done if seq >= target and seq not in self.gone}
        self.done = {seq for seq in self.tags if seq < target} | (self.done & self.gone)
        self._let_go({seq for seq in self.tags if seq < target})
        # An ACK lets a message's count go: one delivered again after a seek back is
        # counted from 2 (it went out before, and a batch wrote so), not from what it
        # had reached; one whose delivery no batch wrote before a restart may count 1.
        for seq in again & set(self.durable):  # (a peer's DONE: not delivered here)
            self.durable[seq] = 1
            self.this_run.discard(seq)

    @rule()
    def restart(self) -> None:
        """A crash or a stop: nothing is out any more; the store is as written."""
        self.store.close()
        self._open()
        self.out.clear()
        self.this_run.clear()

    # -- the promises -------------------------------------------------------------

    @invariant()
    def live_state_reaches_every_wanted_message(self) -> None:
        if not hasattr(self, "state"):
            return
        state = self.state
        waiting = {entry.seq for entry in (*state.ready.entries(), *state.delayed.entries())}
        for seq in self.wanted():
            assert seq in state.inflight or seq in waiting or seq >= state.cursor, (
                f"message {seq} is behind the cursor {state.cursor} and nowhere else")
        assert {entry.seq for entry in state.inflight.entries()} == self.out

    @invariant()
    def a_restart_now_delivers_every_wanted_message(self) -> None:
        if not hasattr(self, "state"):
            return
        probe = DeliveryState(GroupArea(self.store, self.topics, self.group),
                              DeliverySettings(ACK_TIMEOUT_US, EVERYTHING), Counters(),
                              expiry=self.expiry, lanes=self.lanes.for_topic(self.group.topic))
        found: list[int] = []
        probe.deliver(lambda frames: found.append(seq_of(frames)) or True, self.now_us,
                      EVERYTHING)
        assert set(found) == self.wanted(), (
            f"after a restart: missing {sorted(self.wanted() - set(found))}, "
            f"again {sorted(set(found) - self.wanted())} (floor {self.group.floor})")
        assert found == sorted(found, key=self.priority_order), found

    @invariant()
    def default_gets_what_its_rule_holds_after_a_restart_now(self) -> None:
        if not hasattr(self, "state"):
            return
        probe = DeliveryState(DefaultArea(self.store, self.topics),
                              DeliverySettings(ACK_TIMEOUT_US, EVERYTHING), Counters(),
                              expiry=self.expiry, lanes=self.lanes)
        found: list[int] = []
        probe.deliver(lambda frames: found.append(seq_of(frames)) or True, self.now_us,
                      EVERYTHING)
        wanted = self.default_wanted()
        assert set(found) == wanted, (
            f"default ({self.rule}) after a restart: missing {sorted(wanted - set(found))}, "
            f"not its own {sorted(set(found) - wanted)}")

    @invariant()
    def the_peers_are_told_what_default_holds(self) -> None:
        """A node holding copies serves ``default`` in a takeover by what TOPICS says."""
        if not hasattr(self, "state"):
            return
        reads = who_reads(self.topics)
        for seq, tag in self.tags.items():
            if seq in self.gone:
                continue
            told = DEFAULT_GROUP in reads.holders("orders", seq, tag)
            assert told == self.default_holds(seq), (
                f"TOPICS says default {'holds' if told else 'does not hold'} {seq} "
                f"({tag!r}, rule {self.rule})")


GroupModel.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_group_delivery_state_against_its_model = GroupModel.TestCase
