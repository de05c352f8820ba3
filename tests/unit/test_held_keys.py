"""Who holds a group's deliveries is each consumer's ``held`` set alone
(pzq.serving.holding), and the runs it holds as lists of keys: driven by random sends
(one by one, or a run), ACKs of many keys (some held by another consumer, some twice,
some by nobody, a run as sent, part of one) and single releases, it answers as a table
of owners (a dict, as the node kept beside the sets) would."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.rates import LatencyWindow
from pzq.serving.holding import GroupDelivery, ServedConsumer
from pzq.store.store import Store

CONSUMERS = 3
KEYS = st.integers(0, 40)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(0, CONSUMERS - 1), st.lists(KEYS, max_size=12)),
    st.tuples(st.just("ack"), st.integers(0, CONSUMERS - 1), st.lists(KEYS, max_size=12)),
    st.tuples(st.just("release"), st.integers(0, CONSUMERS - 1), st.lists(KEYS, max_size=1)),
    st.tuples(st.just("run"), st.integers(0, CONSUMERS - 1), st.lists(KEYS, max_size=12)),
    st.tuples(st.just("ack_run"), st.integers(0, CONSUMERS - 1), st.lists(KEYS, max_size=2)),
), max_size=40)


@contextmanager
def group_of(folder: Path, consumers: int, ack_timeout_us: int = 1_000_000
             ) -> Iterator[tuple[DeliveryState, GroupDelivery, list[ServedConsumer]]]:
    """A group of ``consumers`` (window 100) over a real store in ``folder``."""
    store = Store.open(folder / "db")
    try:
        state = DeliveryState(OwnArea(store), DeliverySettings(ack_timeout_us, 1 << 20),
                              Counters())
        group = GroupDelivery("g", state, dict, LatencyWindow(), "t")
        group.consumers.extend(ServedConsumer(bytes([at]), group, 100, 0.0)
                               for at in range(consumers))
        yield state, group, list(group.consumers)
    finally:
        store.close()


@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_the_held_sets_answer_as_a_table_of_owners(tmp_path_factory, steps):
    with group_of(Path(tmp_path_factory.mktemp("held")), CONSUMERS) as (state, group, consumers):
        owner: dict[int, ServedConsumer] = {}  # the model
        runs: list[list[int]] = []  # the runs sent, as sent
        for verb, at, keys in steps:
            consumer = consumers[at]
            if verb in ("send", "run"):  # as the sender: only what nobody holds goes out
                fresh = [key for key in dict.fromkeys(keys) if key not in owner]
                if verb == "send":
                    consumer.held.update(fresh)
                else:
                    consumer.hold_run(fresh)
                    runs.append(fresh)
                owner.update(dict.fromkeys(fresh, consumer))
            elif verb == "ack_run":  # an ACK of a run as sent, or of its part (``keys``:
                # which run, and how much of it: all, or all but the first few)
                if runs:
                    run = runs[keys[0] % len(runs) if keys else -1]
                    part = run[keys[1] % 3:] if len(keys) > 1 else list(run)
                    group.let_go(part, consumer)
                    for key in part:
                        owner.pop(key, None)
            elif verb == "ack":
                group.let_go(keys, consumer)
                for key in keys:
                    owner.pop(key, None)
            else:
                for key in keys:
                    group.release(key, consumer)
                    owner.pop(key, None)
            assert group.holders() == owner
            assert all(group.holder_of(key) is owner.get(key) for key in range(41))
            assert all(group.holder_of(key, consumer) is owner.get(key) for key in range(41))
            counts = [sum(holder is each for holder in owner.values()) for each in consumers]
            assert [each.held_count for each in consumers] == counts
            assert [each.window - each.room for each in consumers] == counts
            assert [len(each.held) for each in consumers] == counts


def test_an_ack_of_a_run_as_sent_lets_it_go_without_a_set(tmp_path):
    """A run held whole goes in one step at its ACK (no key put in the set); any other
    answer (part of it, a look at one key) puts it in the set first, and answers the
    same."""
    with group_of(tmp_path, 1) as (state, group, (consumer,)):
        first, second = list(range(10, 20)), list(range(20, 30))
        consumer.hold_run(first)
        consumer.hold_run(second)
        assert consumer.held_count == 20 and consumer.room == 80
        group.let_go(list(second), consumer)  # the second first: either run, as sent
        group.let_go(list(first), consumer)
        assert consumer.held_alone == set() and consumer.held_runs == []
        assert consumer.held_count == 0 and consumer.room == 100
        consumer.hold_run(first)  # part of a run: the rest stays held
        group.let_go(first[3:7], consumer)
        assert consumer.held_runs == []
        assert consumer.held == {10, 11, 12, 17, 18, 19} and consumer.held_count == 6
        consumer.hold_run(second)  # a look at one key (a NACK of the middle): in the set
        assert 25 in consumer.held and consumer.held_runs == []
        consumer.held.discard(25)
        assert consumer.held_count == 15
        group.let_go(second, consumer)  # no run held: the set's keys go, 25 not among them
        assert consumer.held == {10, 11, 12, 17, 18, 19}


def test_part_of_a_run_acked_the_rest_expired_is_overdue_at_its_consumer(tmp_path):
    """A run held whole, part of it ACKed (a piece, not as sent: the run goes into the
    set) and the rest expired at the reaper: the rest is overdue at the consumer (its
    credit still spent), held by nobody; the NACK of one in the middle of another
    run gives that one back alone."""
    with group_of(tmp_path, 1, ack_timeout_us=1_000) as (state, group, (consumer,)):
        seqs = list(range(100, 110))
        state.inflight.add_run(seqs, [b"v%d" % seq for seq in seqs], 0, 1_000, 40)
        consumer.hold_run(seqs)
        acked = state.take_acked(seqs[:4]).seqs
        group.let_go(acked, consumer)
        assert consumer.held == set(seqs[4:]) and consumer.room == 94
        assert state.reap(2_000) == 6
        group.settle(expired=True)
        assert consumer.held == set() and consumer.overdue == set(seqs[4:])
        assert consumer.room == 94  # the expired ones' credit stays spent
        others = list(range(200, 210))
        state.inflight.add_run(others, [b"w%d" % seq for seq in others], 3_000, 4_000, 40)
        consumer.hold_run(others)
        assert 205 in consumer.held  # a NACK's look: the run put in the set
        consumer.held.discard(205)
        assert state.nack(205)
        assert consumer.held == set(others) - {205} and 205 not in state.inflight
        group.let_go(others, consumer)  # its ACK as sent: the others go, 205 was not held
        assert consumer.held == set() and consumer.room == 94
