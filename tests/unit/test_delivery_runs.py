"""Runs of first deliveries (pzq.delivery.first_runs): the messages at the start of a
read that go out for the first time are handed over in one call, and everything else
goes one at a time as before, on a real store with time passed in."""

from __future__ import annotations

import pytest

from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.expiry import DROP, KEEP, NO_EXPIRY, Expiry
from pzq.delivery.first_runs import RUN_AT_LEAST, first_run
from pzq.delivery.groups import GroupArea
from pzq.delivery.held import NOBODY_ELSE, HeldElsewhere
from pzq.delivery.inflight import LET_GO_KEPT, InFlight, InFlightTable
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.protocol.message_keys import message_key, parse_message_key
from pzq.store import record
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import Topics
from tests.support.stored import stored

pytestmark = pytest.mark.timeout(20)
TIMEOUT = 1_000


class EachConsumer:
    """Takes up to ``room`` deliveries one at a time: (seq, count) of each."""

    def __init__(self, room: int = 1_000_000) -> None:
        self.room = room
        self.sent: list[tuple[int, int]] = []

    def __call__(self, seq: int, key: bytes, value: bytes, deliveries: int) -> bool:
        if self.room <= 0:
            return False
        assert parse_message_key(key)[1] == seq
        self.room -= 1
        self.sent.append((seq, deliveries))
        return True


class RunConsumer:
    """Takes up to ``room`` deliveries of each run it is offered: the seqs of each run
    as taken."""

    def __init__(self, room: int = 1_000_000) -> None:
        self.room = room
        self.runs: list[list[int]] = []

    def __call__(self, node_id: bytes, seqs: list[int], values: list[bytes]) -> int:
        taken = min(self.room, len(seqs))
        assert len(values) == len(seqs) and all(
            record.bookkeeping(value) == (0, 0) for value in values)
        self.room -= taken
        if taken:
            self.runs.append(seqs[:taken])
        return taken

    def seqs(self) -> list[int]:
        return [seq for run in self.runs for seq in run]


class HeldOnes(HeldElsewhere):
    """Another node has these out."""

    def __init__(self, seqs: set[int]) -> None:
        self.seqs = seqs

    def holds(self, seq: int) -> bool:
        return seq in self.seqs

    def any(self) -> bool:
        return bool(self.seqs)

    def lowest(self) -> int | None:
        return min(self.seqs, default=None)


class ExpiredOnes:
    """Expiry watched, and these messages expired (dropped)."""

    def __init__(self, seqs: set[int]) -> None:
        self.seqs = seqs

    def watching(self, now_us: int) -> bool:
        return True

    def verdict(self, seq: int, value: bytes, now_us: int) -> int:
        return DROP if seq in self.seqs else KEEP

    def expired_final(self, batch: Batch, seq: int, value: bytes, dead: bool) -> None:
        pass


def new_state(store: Store, inflight_size: int = 1 << 20, held: HeldElsewhere = NOBODY_ELSE,
              expiry: Expiry = NO_EXPIRY) -> DeliveryState:
    settings = DeliverySettings(TIMEOUT, inflight_size, with_headers=True)
    state = DeliveryState(OwnArea(store), settings, Counters(), held=held, expiry=expiry)
    state.run_at_least = 1  # runs of any length: each edge shows with a few messages
    store.register(state)
    return state




def ack_all(state: DeliveryState, seqs: list[int]) -> None:
    batch = state.area.store.begin()
    state.ack_all(batch, seqs)
    state.area.store.commit(batch)


def test_an_acks_deletes_are_leaving_until_written_and_owed_again_when_the_write_failed(store):
    state = new_state(store)
    seqs = stored(store, 5)
    assert state.deliver_raw(EachConsumer(), 100, 100, RunConsumer()) == 5
    batch = store.begin()
    state.ack_all(batch, [*seqs[:3], seqs[0]])  # one key twice: unknown the second time
    assert [state.owed.leaving(seq) for seq in seqs] == [True, True, True, False, False]
    assert state.counters.unknown_acks == 1 and state.owed.any_leaving()
    assert sorted(state.owed.leaving_seqs()) == seqs[:3]
    state.failed()  # the batch was not written: nothing of it applied
    assert store.messages == 5 and all(map(state.owed.leaving, seqs[:3]))
    state.rewind()  # a look at every message again: those leaving are not delivered
    each = EachConsumer()
    assert state.deliver_raw(each, 200, 100) == 0 and each.sent == []
    store.commit(store.begin())  # the next batch writes the deletes owed
    assert store.messages == 2 and not state.owed.any_leaving()
    assert [seq for seq in seqs if store.get_own(seq) is not None] == seqs[3:]


def test_a_read_of_first_deliveries_goes_in_one_run_and_is_tracked(store):
    state = new_state(store)
    seqs = stored(store, 7)
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, 100, run) == 7
    assert run.runs == [seqs] and each.sent == []
    entries = state.inflight.entries()
    assert [entry.seq for entry in entries] == seqs
    assert {(entry.sent_us, entry.deadline_us, entry.deliveries, entry.first_delivered_us)
            for entry in entries} == {(100, 100 + TIMEOUT, 1, 100)}
    assert state.inflight.bytes == sum(len(store.get_own(seq)) for seq in seqs)
    assert state.cursor == 7 and state.counters.delivered == 7 and not state.has_work()
    ack_all(state, seqs)
    assert store.messages == 0 and state.inflight.bytes == 0


def test_the_outlet_takes_a_prefix_and_the_rest_goes_later_once(store):
    state = new_state(store)
    seqs = stored(store, 8)
    each, run = EachConsumer(room=0), RunConsumer(room=3)
    assert state.deliver_raw(each, 100, 100, run) == 3
    assert run.runs == [seqs[:3]] and state.cursor == 3 and len(state.inflight) == 3
    each.room, run.room = 1, 2  # one alone, after a run of two
    assert state.deliver_raw(each, 200, 100, run) == 3
    assert run.runs == [seqs[:3], seqs[3:5]] and each.sent == [(5, 1)]
    run.room = 10
    assert state.deliver_raw(each, 300, 100, run) == 2
    assert run.seqs() + [seq for seq, _ in each.sent] == [*seqs[:5], 6, 7, 5]
    assert sorted(entry.seq for entry in state.inflight.entries()) == seqs


def test_a_run_stops_at_the_in_flight_bytes_and_evicted_ones_go_first(store):
    seqs = stored(store, 6)
    size = len(store.get_own(seqs[0]))
    state = new_state(store, inflight_size=4 * size + size // 2)  # room for four
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, 100, run) == 4
    assert run.runs == [seqs[:4]] and each.sent == []  # the fifth waits: nothing evictable
    assert state.inflight.bytes == 4 * size and not state.has_work()
    ack_all(state, seqs[:1])
    assert state.deliver_raw(each, 200, 100, run) == 1  # room for one more
    assert run.runs[1:] == [seqs[4:5]]
    state.reap(300)  # what went before now may be evicted; no deadline passed
    assert state.deliver_raw(each, 300, 2, run) == 2
    # the sixth went alone, evicting the oldest out, which went again before anything
    # newer (evicting the next oldest, which waits its turn)
    assert each.sent == [(seqs[5], 1), (seqs[1], 2)]
    assert sorted(entry.seq for entry in state.inflight.entries()) == [1, 3, 4, 5]
    assert [entry.seq for entry in state.ready.entries()] == [2]


def test_a_run_passes_over_what_is_out_waiting_or_another_nodes(store):
    held = HeldOnes(set())
    state = new_state(store, held=held)
    seqs = stored(store, 6)
    each, run = EachConsumer(), RunConsumer()
    state.deliver_raw(each, 100, 100, run)
    ack_all(state, seqs[:1])
    assert state.nack(seqs[2], due_us=10_000)  # waiting out a delay
    state.rewind()  # an operator's seek: the cursor goes back to the start
    more = stored(store, 5)
    held.seqs.add(more[2])
    assert state.deliver_raw(each, 200, 100, run) == 4
    assert run.runs[1:] == [[more[0], more[1], more[3], more[4]]] and each.sent == []
    out = [entry.seq for entry in state.inflight.entries()]
    assert sorted(out) == [seq for seq in seqs + more if seq not in (0, 2, more[2])]
    assert len(out) == len(set(out))


def test_a_message_delivered_before_a_restart_ends_the_run(tmp_path):
    store = Store.open(tmp_path / "db")
    seqs = stored(store, 6)
    state = new_state(store)
    state.deliver_raw(EachConsumer(), 100, 3, RunConsumer())  # three out at the stop
    store.commit(store.begin())  # the next wake's batch: how far deliveries went
    store.close()
    store = Store.open(tmp_path / "db")
    state = new_state(store)
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 200, 100, run) == 6
    assert run.runs == [] and each.sent == [*((seq, 2) for seq in seqs[:3]),
                                           *((seq, 1) for seq in seqs[3:])]
    later = stored(store, 2)
    assert state.deliver_raw(each, 300, 100, run) == 2 and run.runs == [later]
    store.close()


def test_a_message_given_back_and_stored_again_goes_alone(store):
    """A record whose count is stored (given back and written) is no first delivery."""
    state = new_state(store)
    seqs = stored(store, 3)
    batch = store.begin()
    value = store.get_own(seqs[1])
    state.area.rewrite(batch, seqs[1], record.with_bookkeeping(value, 50, 1))
    store.commit(batch)
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, 100, run) == 3
    assert run.runs == [seqs[:1]] and each.sent == [(seqs[1], 2), (seqs[2], 1)]
    assert message_key(store.node_id, seqs[1]) in {
        message_key(store.node_id, entry.seq) for entry in state.inflight.entries()}


def test_an_expired_message_ends_the_run_and_is_never_delivered(store):
    seqs = stored(store, 5)
    state = new_state(store, expiry=ExpiredOnes({seqs[2]}))
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, 100, run) == 4
    assert run.runs == [seqs[:2]] and each.sent == [(seqs[3], 1), (seqs[4], 1)]
    assert [entry.seq for entry in state.take_newly_dropped()] == [seqs[2]]
    assert sorted(entry.seq for entry in state.inflight.entries()) == [0, 1, 3, 4]


def test_a_read_shorter_than_a_run_is_worth_goes_one_at_a_time(store):
    state = new_state(store)
    state.run_at_least = RUN_AT_LEAST
    seqs = stored(store, RUN_AT_LEAST + 1)
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, RUN_AT_LEAST - 1, run) == RUN_AT_LEAST - 1
    assert run.runs == [] and [seq for seq, _ in each.sent] == seqs[:RUN_AT_LEAST - 1]
    stored(store, RUN_AT_LEAST)
    assert state.deliver_raw(each, 100, 100, run) == RUN_AT_LEAST + 2
    assert run.seqs() == list(range(RUN_AT_LEAST - 1, 2 * RUN_AT_LEAST + 1))


def test_a_named_groups_kept_count_ends_its_run_and_a_fresh_read_is_not_looked_at_again(
        store):
    """A named group's read says whether any record it found has a count of the
    group's (kept once a message went out more than once): a fresh one is a run
    whole, without a look at each record; one with a count ends the run before it."""
    topics = Topics(store, "default")
    store.register(topics)
    group = topics.add_group(topics.topic("orders", 0), "audit", 0, "", 0)
    batch = store.begin()
    for body in (b"a", b"b", b"c", b"d"):
        value = record.encode(b"id", (b"TOPIC:orders",), (body,), 1)
        topics.note_new(batch, batch.add_message(value), topics.topics["orders"], b"",
                        len(value))
    store.commit(batch)
    area = GroupArea(store, topics, group)
    chunk = area.read(0, 100)
    assert chunk.fresh and [seq for seq, _ in chunk.found] == [0, 1, 2, 3]
    batch = store.begin()
    area.rewrite(batch, 2, record.with_bookkeeping(chunk.found[2][1], 50, 2))
    store.commit(batch)
    again = GroupArea(store, topics, group).read(0, 100)
    assert not again.fresh and record.bookkeeping(again.found[2][1]) == (50, 2)
    run = first_run(again.seqs, again.values, set(), 0, 1 << 20, again.fresh)
    assert run.seqs == [0, 1] and run.size == sum(len(v) for _, v in again.found[:2])
    state = DeliveryState(GroupArea(store, topics, group),
                          DeliverySettings(TIMEOUT, 1 << 20), Counters())
    state.run_at_least = 1
    store.register(state)
    each, runs = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, 100, runs) == 4
    assert runs.runs == [[0, 1]] and each.sent == [(2, 3), (3, 1)]  # the rest one by one


def test_a_runs_deliveries_held_compactly_are_whole_deliveries_to_acks_reaps_and_looks(
        store):
    """A run's deliveries are held as (record, sent, deadline): an ACK of keys of runs
    and of single deliveries together, a look, and a reap see each as it was sent."""
    state = new_state(store)
    seqs = stored(store, 4)
    each, run = EachConsumer(), RunConsumer()
    assert state.deliver_raw(each, 100, 100, run) == 4 and run.runs == [seqs]
    more = stored(store, 2)
    assert state.deliver_raw(each, 200, 100, RunConsumer(room=0)) == 2  # one by one
    assert each.sent == [(more[0], 1), (more[1], 1)]
    value = store.get_own(seqs[0])
    assert state.inflight.get(seqs[0]) == InFlight(seqs[0], value, 100, 100 + TIMEOUT, 1, 100)
    assert state.inflight.lowest() == state.inflight.oldest() == state.inflight.get(seqs[0])
    batch = store.begin()
    acked, finals, unknown = state.ack_all(batch, [seqs[1], more[0], seqs[1]])
    store.commit(batch)
    assert (acked.seqs, acked.sent_us, finals, unknown) == (
        [seqs[1], more[0]], [100, 200], [True, True], [seqs[1]])
    assert state.inflight.bytes == sum(len(store.get_own(seq))
                                       for seq in (seqs[0], seqs[2], seqs[3], more[1]))
    assert state.inflight.seqs() == [seqs[0], seqs[2], seqs[3], more[1]]
    assert state.reap(100 + TIMEOUT) == 3  # the run's deadline came, not the later one's
    assert [entry.seq for entry in state.inflight.entries()] == [more[1]]
    assert [(entry.seq, record.bookkeeping(entry.value)) for entry in state.ready.entries()
            ] == [(seq, (100, 1)) for seq in (seqs[0], seqs[2], seqs[3])]
    assert state.deliver_raw(each, 300 + TIMEOUT, 100, run) == 3
    assert each.sent[2:] == [(seqs[0], 2), (seqs[2], 2), (seqs[3], 2)]
    assert state.lowest_open() == seqs[0]


def test_the_in_flight_tables_runs_and_single_deliveries_keep_one_send_order():
    """Runs are ordered once each, deliveries sent alone one by one: the reaper and the
    LRU bound take the oldest of both, a run's first on equal deadlines (never the
    delivery just added), and what an ACK left of a run's order is let go."""
    table = InFlightTable(max_bytes=10 * 3)
    record_of = b"%03d".__mod__
    table.add_run([1, 2, 3], list(map(record_of, [1, 2, 3])), 10, 110, 9)
    table.add(InFlight(7, record_of(7), 20, 120, 2, 5))
    table.add_run([4, 5], list(map(record_of, [4, 5])), 30, 130, 6)
    table.add(InFlight(8, record_of(8), 30, 130, 1, 30))  # sent alone in the run's wake
    assert table.seqs() == [1, 2, 3, 7, 4, 5, 8] and len(table) == 7
    assert table.among([9, 8, 5, 1]) == {8, 5, 1} and 3 in table and 6 not in table
    taken = table.take_all([2, 8, 1, 2])
    assert (taken.seqs, taken.sent_us, taken.missing) == ([2, 8, 1], [10, 30, 10], [2])
    assert table.oldest() == InFlight(3, record_of(3), 10, 110, 1, 10)
    assert [entry.seq for entry in table.expire(120)] == [3, 7]
    # full: the oldest go, the run's deliveries of the same deadline before the new one
    assert [entry.seq for entry in table.add(InFlight(9, b"x" * 28, 30, 130, 2, 1))] == [4, 5]
    assert table.seqs() == [9] and table.bytes == 28
    assert table.pop(9) is not None and table.bytes == 0 and table.oldest() is None


def test_the_in_flight_tables_run_orders_stay_bounded_behind_one_left_out():
    """A run delivery that is never ACKed does not keep every run after it: once more
    runs were let go behind it than are out (and a bound), they leave the send order."""
    table = InFlightTable(max_bytes=1 << 30)
    table.add_run([0], [b"r"], 0, 1_000, 1)  # never ACKed
    for first in range(1, 100 * 20 * LET_GO_KEPT, 100):
        seqs = list(range(first, first + 100))
        table.add_run(seqs, [b"r"] * 100, first, first + 1_000, 100)
        assert table.take_all(seqs).missing == []
        assert len(table._runs) <= 2 + LET_GO_KEPT  # the one out, and a bound
    assert table.seqs() == [0] and table.oldest() == InFlight(0, b"r", 0, 1_000, 1, 0)


def test_a_delivery_out_again_in_a_later_run_keeps_that_runs_place():
    """A seq an older run's order still lists (ACKed there, say, then out again after a
    rewind) is in the order of the run that sent it last, not the first one's."""
    table = InFlightTable(max_bytes=1_000)
    table.add_run([1, 2], [b"a", b"b"], 0, 100, 2)
    assert table.take_all([1]).seqs == [1]
    table.add_run([1, 3], [b"a", b"c"], 50, 150, 2)
    assert table.seqs() == [2, 1, 3] and table.oldest() == InFlight(2, b"b", 0, 100, 1, 0)
    assert [entry.seq for entry in table.expire(100)] == [2]
    assert table.oldest() == InFlight(1, b"a", 50, 150, 1, 50)
    assert [entry.seq for entry in table.expire(150)] == [1, 3] and len(table) == 0
