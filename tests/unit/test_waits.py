"""The waits of given-back deliveries kept in the store (pzq.delivery.waits): their keys
and values, and a delivery state that keeps them across a reopen of its store."""

from __future__ import annotations

from pathlib import Path

import pytest

from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.delivery.waits import DUE, KeptWaits, decode_due, encode_due
from pzq.store import keyspace
from pzq.store.store import Store
from tests.support.stored import stored
from tests.unit.test_delivery_state import Consumers

pytestmark = pytest.mark.timeout(20)
TIMEOUT = 1_000
SETTINGS = DeliverySettings(TIMEOUT, 10_000, with_headers=True)
GROUP = 7


# -- the encoding ------------------------------------------------------------------------

def test_a_wait_s_key_is_its_group_and_seq_and_its_value_the_due_time():
    assert keyspace.wait_key(GROUP, 258) == b"W" + bytes([0, 0, 0, 7]) + bytes(6) + b"\1\2"
    assert keyspace.wait_key(GROUP, 258).startswith(keyspace.wait_prefix(GROUP))
    assert keyspace.seq_at_end(keyspace.wait_key(GROUP, 258)) == 258
    due = 1_764_500_000_123_456
    assert encode_due(due) == DUE.pack(due) and len(encode_due(due)) == 8
    assert decode_due(encode_due(due)) == due


def test_a_group_s_waits_sort_by_seq_and_apart_from_other_groups():
    keys = [keyspace.wait_key(group, seq) for group, seq in ((2, 1), (1, 300), (1, 2))]
    assert sorted(keys) == [keyspace.wait_key(1, 2), keyspace.wait_key(1, 300),
                            keyspace.wait_key(2, 1)]


@pytest.mark.parametrize("value", [b"", b"1234567", bytes(9)])
def test_a_value_that_is_not_a_due_time_is_refused(value):
    with pytest.raises(ValueError, match="a wait's value is 8 bytes"):
        decode_due(value)


def test_a_wait_whose_value_is_not_a_due_time_is_loaded_as_due_now(tmp_path):
    store = Store.open(tmp_path / "db")
    batch = store.begin()
    batch.put(keyspace.wait_key(0, 4), b"??")
    batch.put(keyspace.wait_key(0, 5), encode_due(99))
    batch.put(keyspace.wait_key(1, 6), encode_due(99))  # another group's
    store.commit(batch)
    waits = KeptWaits(store, 0)
    assert waits.load() == [(4, 0), (5, 99)]
    assert waits.stored == {4, 5}
    store.close()


# -- a delivery state's waits, across a reopen ---------------------------------------------

def open_state(path: Path, settings: DeliverySettings = SETTINGS
               ) -> tuple[Store, DeliveryState]:
    """The store, and a delivery state of its own messages as ``default``, as a node
    makes them at its start."""
    store = Store.open(path)
    state = DeliveryState(OwnArea(store), settings, Counters(), waits=KeptWaits(store, 0))
    store.register(state)
    return store, state


def waits_stored(store: Store) -> dict[int, int]:
    return {keyspace.seq_at_end(key): decode_due(value)
            for key, value in store.iterate(keyspace.WAIT_PREFIX)}


def nack(store: Store, state: DeliveryState, seq: int, due_us: int = 0) -> None:
    batch = store.begin()
    assert state.nack(seq, due_us, batch)
    store.commit(batch)


def test_a_nack_s_delay_is_written_with_its_batch_and_waits_again_after_a_reopen(tmp_path):
    path = tmp_path / "db"
    store, state = open_state(path)
    first, second = stored(store, 2)
    state.deliver(Consumers(), 100, 10)
    nack(store, state, first, due_us=50_000)
    assert waits_stored(store) == {first: 50_000}  # the NACK's batch wrote it
    store.close()  # nothing more written: as a SIGKILL right after the NACK

    store, state = open_state(path)
    assert seq_list(state.delayed.seqs()) == [first] and state.next_due_us() == 50_000
    consumers = Consumers()
    state.deliver(consumers, 49_999, 10)
    assert consumers.seqs() == [second]  # the cursor passes over the waiting one
    state.deliver(consumers, 50_000, 10)
    assert consumers.seqs() == [second, first]
    assert consumers.sent[-1].deliveries == 2  # given back once: its count goes on
    store.commit(store.begin())  # the wait over, its key goes with the next batch
    assert waits_stored(store) == {}
    store.close()


def seq_list(seqs: list[int]) -> list[int]:
    return sorted(seqs)


def test_a_wait_whose_time_passed_while_the_node_was_down_goes_at_once(tmp_path):
    path = tmp_path / "db"
    store, state = open_state(path)
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    nack(store, state, seq, due_us=5_000)
    store.close()
    store, state = open_state(path)
    consumers = Consumers()
    state.deliver(consumers, 5_001, 10)
    assert consumers.seqs() == [seq]
    store.close()


def test_a_backoff_s_wait_is_written_with_the_reaper_s_wake_and_kept(tmp_path):
    path = tmp_path / "db"
    settings = DeliverySettings(TIMEOUT, 10_000, with_headers=True, backoff_us=(60_000,))
    store, state = open_state(path, settings)
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 0, 10)
    assert state.reap(TIMEOUT) == 1
    store.commit(store.begin())  # the wake's batch, begun after its ticks
    assert waits_stored(store) == {seq: TIMEOUT + 60_000}
    store.close()
    store, state = open_state(path, settings)
    consumers = Consumers()
    state.deliver(consumers, TIMEOUT + 59_999, 10)
    assert consumers.sent == []
    state.deliver(consumers, TIMEOUT + 60_000, 10)
    assert consumers.seqs() == [seq]
    store.close()


@pytest.mark.parametrize("answer", ["ack", "reject", "nack again", "nack later"])
def test_an_answer_to_a_waiting_delivery_removes_or_replaces_its_wait(tmp_path, answer):
    path = tmp_path / "db"
    store, state = open_state(path)
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    nack(store, state, seq, due_us=50_000)
    if answer in ("nack again", "nack later"):
        state.deliver(Consumers(), 50_000, 10)  # out again once its wait is over
        nack(store, state, seq, due_us=90_000 if answer == "nack later" else 0)
    else:
        batch = store.begin()
        assert state.ack(batch, seq) if answer == "ack" else state.reject(seq)
        store.commit(batch)
    store.commit(store.begin())  # what the answer left for the next batch (a REJECT's)
    expected = {seq: 90_000} if answer == "nack later" else {}
    assert waits_stored(store) == expected
    store.close()
    store, state = open_state(path)
    assert {entry.seq: state.next_due_us() for entry in state.delayed.entries()} == expected
    store.close()


def test_an_ack_deletes_the_wait_s_key_in_its_own_batch(tmp_path):
    store, state = open_state(tmp_path / "db")
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    nack(store, state, seq, due_us=50_000)
    batch = store.begin()
    state.ack(batch, seq)
    store.commit(batch)
    assert waits_stored(store) == {} and store.messages == 0
    store.close()


def test_a_wait_whose_message_left_is_dropped_at_the_start(tmp_path):
    path = tmp_path / "db"
    store, state = open_state(path)
    first, second = stored(store, 2)
    batch = store.begin()
    batch.put(keyspace.wait_key(0, first), encode_due(50_000))  # left by a delete cut short
    batch.delete_message(first, len(store.get_own(first) or b""))
    store.commit(batch)
    store.close()
    store, state = open_state(path)
    assert not state.delayed
    store.commit(store.begin())
    assert waits_stored(store) == {}
    consumers = Consumers()
    state.deliver(consumers, 100, 10)
    assert consumers.seqs() == [second]
    store.close()


def test_a_failed_batch_writes_its_waits_with_the_next_one(tmp_path):
    store, state = open_state(tmp_path / "db")
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    batch = store.begin()
    state.nack(seq, 50_000, batch)
    state.failed()  # as if store.commit(batch) had raised StoreError
    assert waits_stored(store) == {}
    store.commit(store.begin())
    assert waits_stored(store) == {seq: 50_000}
    store.close()


def test_nothing_is_written_for_a_delivery_that_never_waits(tmp_path):
    store, state = open_state(tmp_path / "db")
    seqs = stored(store, 3)
    state.deliver(Consumers(), 100, 10)
    nack(store, state, seqs[0])  # at once
    state.reap(100 + TIMEOUT)  # no backoff
    store.commit(store.begin())
    for seq in seqs:
        batch = store.begin()
        state.ack(batch, seq)
        store.commit(batch)
    assert waits_stored(store) == {} and not state.waits.stored
    store.close()
