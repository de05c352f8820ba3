"""What a delivery pass asks of each group (pzq.serving.holding): its states, its
sources, its consumers' room and turn, whether any has one overdue. Driven by random
consumers (windows, held and overdue sets, unreachable ones) and other origins
(taken over or replayed, some paused), each answers as its simple form would; and a
group with no other origin answers from one list kept, not one built a wake."""

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

CONSUMER = st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 3), st.booleans())
STEPS = st.lists(st.tuples(
    st.lists(CONSUMER, max_size=4),  # window, held, overdue, unreachable
    st.lists(st.booleans(), max_size=3),  # the other origins, paused or not
    st.booleans()), min_size=1, max_size=12)  # the own messages allowed


def simple_sources(own: DeliveryState, others: list[DeliveryState], own_allowed: bool
                   ) -> list[DeliveryState]:
    return ([own] if own_allowed else []) + [state for state in others if not state.paused]


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_a_groups_answers_are_their_simple_forms(tmp_path_factory, steps):
    store = Store.open(Path(tmp_path_factory.mktemp("asks")) / "db")
    try:
        def state() -> DeliveryState:
            return DeliveryState(OwnArea(store), DeliverySettings(1_000, 1 << 20), Counters())

        others: dict[bytes, DeliveryState] = {}
        group = GroupDelivery("g", state(), lambda: others, LatencyWindow(), "t")
        turn = 0  # the model's
        for consumers, origins, own_allowed in steps:
            group.consumers[:] = [
                ServedConsumer(bytes([at]), group, window, 0.0, held_alone=set(range(held)),
                               overdue=set(range(100, 100 + overdue)), unreachable=gone)
                for at, (window, held, overdue, gone) in enumerate(consumers)]
            others.clear()
            for at, paused in enumerate(origins):
                others[b"%08x" % at] = taken = state()
                taken.paused = paused
            every = [group.state, *others.values()]
            assert group.every_state() == every
            expected = simple_sources(group.state, list(others.values()), own_allowed)
            assert group.sources(own_allowed) == expected
            assert group.sources(own_allowed, group.every_state()) == expected
            assert group.room() == sum(max(0, each.room) for each in group.consumers)
            assert group.any_overdue() == any(each.overdue for each in group.consumers)
            count = len(group.consumers)
            turn = (turn + 1) % max(1, count)
            ordered = group.consumers[turn:] + group.consumers[:turn]
            assert group.next_consumers() == [each for each in ordered if each.room > 0]
    finally:
        store.close()


def test_a_group_of_its_own_messages_alone_lists_its_states_once(tmp_path):
    """No other origin: every wake's pass gets the same list (none built), and the
    sources are that list while the own messages are allowed."""
    store = Store.open(tmp_path / "db")
    try:
        own = DeliveryState(OwnArea(store), DeliverySettings(1_000, 1 << 20), Counters())
        group = GroupDelivery("g", own, dict, LatencyWindow(), "t")
        states = group.every_state()
        assert states == [own] and group.every_state() is states
        assert group.sources(True, states) is states and group.sources(True) is states
        assert group.sources(False, states) == []
    finally:
        store.close()
