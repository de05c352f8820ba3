"""Who holds a group's deliveries is each consumer's ``held`` set alone
(pzq.serving.holding): driven by random sends, ACKs of many keys (some held by
another consumer, some twice, some by nobody) and single releases, it answers as a
table of owners (a dict, as the node kept beside the sets) would."""

from __future__ import annotations

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
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_the_held_sets_answer_as_a_table_of_owners(tmp_path_factory, steps):
    store = Store.open(Path(tmp_path_factory.mktemp("held")) / "db")
    try:
        state = DeliveryState(OwnArea(store), DeliverySettings(1_000_000, 1 << 20), Counters())
        group = GroupDelivery("g", state, dict, LatencyWindow(), "t")
        consumers = [ServedConsumer(bytes([at]), group, 100, 0.0) for at in range(CONSUMERS)]
        group.consumers.extend(consumers)
        owner: dict[int, ServedConsumer] = {}  # the model
        for verb, at, keys in steps:
            consumer = consumers[at]
            if verb == "send":  # as the sender: only what nobody holds goes out
                fresh = [key for key in dict.fromkeys(keys) if key not in owner]
                consumer.held.update(fresh)
                owner.update(dict.fromkeys(fresh, consumer))
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
            assert [len(each.held) for each in consumers] == [
                sum(holder is each for holder in owner.values()) for each in consumers]
    finally:
        store.close()
