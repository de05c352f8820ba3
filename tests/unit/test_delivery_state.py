"""The delivery state machine on a real store, with time passed in (no sleeping)."""

from __future__ import annotations

import pytest

from pzq.counters import Counters
from pzq.delivery.areas import OwnArea
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.protocol import frames as wire
from pzq.protocol.message_keys import parse_message_key
from pzq.store import record
from pzq.store.store import Store
from tests.support.stored import stored

pytestmark = pytest.mark.timeout(20)
TIMEOUT = 1_000


class Consumers:
    """Stands in for the send socket: takes up to ``room`` deliveries."""

    def __init__(self, room: int = 1_000_000) -> None:
        self.room = room
        self.sent: list[wire.Delivery] = []

    def __call__(self, frames: list[bytes]) -> bool:
        if self.room <= 0:
            return False
        self.room -= 1
        self.sent.append(wire.decode_delivery([b"peer", *frames]))
        return True

    def seqs(self) -> list[int]:
        return [parse_message_key(d.key)[1] for d in self.sent]


def new_state(store: Store, settings: DeliverySettings, counters: Counters) -> DeliveryState:
    """A delivery state of the store's own messages, following its batches."""
    state = DeliveryState(OwnArea(store), settings, counters)
    store.register(state)
    return state


def ack(state: DeliveryState, seq: int, ok: bool = True) -> None:
    store = state.area.store
    batch = store.begin()
    state.ack(batch, seq) if ok else state.nack(seq)
    store.commit(batch)


def test_first_delivery_in_order_then_acked(store):
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), Counters())
    seqs = stored(store, 5)
    consumers = Consumers()
    assert state.deliver(consumers, now_us=100, limit=100) == 5
    assert consumers.seqs() == seqs
    assert consumers.sent[0].sent_us == 100 and consumers.sent[0].ack_timeout_us == TIMEOUT
    assert not state.has_work()
    for seq in seqs:
        ack(state, seq)
    assert store.messages == 0 and len(state.inflight) == 0


def test_full_consumers_keep_the_rest_for_later(store):
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), Counters())
    seqs = stored(store, 5)
    consumers = Consumers(room=2)
    assert state.deliver(consumers, 100, 100) == 2
    assert state.has_work()
    consumers.room = 10
    state.deliver(consumers, 101, 100)
    assert consumers.seqs() == seqs


def test_expired_delivery_goes_first_and_counts_deliveries(store):
    counters = Counters()
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000, with_headers=True), counters)
    first, second = stored(store, 2)
    consumers = Consumers(room=1)
    state.deliver(consumers, 100, 100)
    assert state.reap(100 + TIMEOUT - 1) == 0
    assert state.reap(100 + TIMEOUT) == 1
    consumers.room = 10
    state.deliver(consumers, 2000, 100)
    assert consumers.seqs() == [first, first, second]
    assert consumers.sent[1].deliveries == 2
    assert counters.expired == 1 and counters.redelivered == 1


@pytest.mark.parametrize("given_back", [False, True], ids=["out-at-the-stop", "nacked"])
def test_delivery_counts_only_grow_across_restarts(tmp_path, given_back):
    """What was out at a stop comes again after the restart with a higher count: the
    first delivery is known from how far the deliveries went, a later one from its
    count, both written with the next batch."""
    path, counts = tmp_path / "db", []
    for _ in range(3):
        store = Store.open(path)  # as after a restart: nothing is out
        state = new_state(store, DeliverySettings(TIMEOUT, 10_000, with_headers=True),
                          Counters())
        (seq,) = stored(store, 1) if not counts else (0,)
        consumers = Consumers()
        state.deliver(consumers, 100, 10)
        counts.append(consumers.sent[0].deliveries)
        if given_back:
            ack(state, seq, ok=False)
        store.commit(store.begin())  # the next wake's batch
        store.close()
    assert counts == [1, 2, 3]
    store = Store.open(path)
    assert record.bookkeeping(store.get_own(0)) == (100, 3)
    store.close()


def test_late_ack_removes_a_message_waiting_for_redelivery(store):
    counters = Counters()
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), counters)
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    state.reap(100 + TIMEOUT)
    ack(state, seq)
    assert store.messages == 0 and not state.has_work()
    assert counters.late_acks == 1


def test_ack_after_restart_removes_a_stored_message(store):
    (seq,) = stored(store, 1)
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), Counters())  # nothing in memory
    ack(state, seq)
    assert store.messages == 0
    assert state.deliver(Consumers(), 100, 10) == 0


def test_ack_of_a_message_never_delivered_is_unknown_and_it_is_delivered(store):
    """An ACK naming a message stored since the state was made that no delivery has
    reached yet removes nothing (Redis's XACK of an id never read): it is counted
    unknown, and the message is delivered after all."""
    counters = Counters()
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), counters)
    first, second = stored(store, 2)
    consumers = Consumers(room=1)
    assert state.deliver(consumers, 100, 10) == 1
    batch = store.begin()
    assert state.ack(batch, second) is None
    assert state.ack_all(batch, [second])[0].seqs == []
    store.commit(batch)
    assert store.messages == 2 and counters.unknown_acks == 2 and counters.acked == 0
    consumers.room = 10
    assert state.deliver(consumers, 200, 10) == 1
    assert consumers.seqs() == [first, second]
    ack(state, second)
    assert store.messages == 1 and counters.acked == 1


def test_duplicate_ack_in_one_batch_counts_once(store):
    counters = Counters()
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), counters)
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    batch = store.begin()
    assert state.ack(batch, seq) is not None
    assert state.ack(batch, seq) is None
    store.commit(batch)
    assert store.messages == 0 and counters.acked == 1 and counters.unknown_acks == 1


def test_lru_evicts_only_deliveries_older_than_the_last_reap(store):
    counters = Counters()
    state = new_state(store, DeliverySettings(TIMEOUT * 1000, 100), counters)
    seqs = stored(store, 4)
    record_size = len(store.get_own(seqs[0]))
    state.inflight.max_bytes = record_size * 2
    consumers = Consumers()
    assert state.deliver(consumers, 100, 10) == 2  # full: nothing old enough to evict
    assert not state.has_work()  # so the loop waits instead of spinning
    state.reap(200)  # no deadline passed, but both are now older than the last reap
    assert state.has_work()
    state.deliver(consumers, 300, 10)
    assert counters.evicted >= 1
    assert consumers.seqs()[:3] == [seqs[0], seqs[1], seqs[2]]
    assert seqs[0] in consumers.seqs()[3:]  # the evicted one came back before seqs[3]
    assert state.inflight.bytes <= record_size * 2


def test_failed_write_keeps_deletes_for_the_next_batch(store):
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000), Counters())
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 100, 10)
    batch = store.begin()
    state.ack(batch, seq)
    state.failed()  # as if store.commit(batch) had raised StoreError
    assert store.messages == 1
    retry = store.begin()
    store.commit(retry)
    assert store.messages == 0


def test_a_backoff_holds_an_expired_delivery_back_then_repeats_its_last_step(store):
    settings = DeliverySettings(TIMEOUT, 10_000, with_headers=True, backoff_us=(100, 500))
    counters = Counters()
    state = new_state(store, settings, counters)
    (seq,) = stored(store, 1)
    consumers = Consumers()
    now, counts = 0, []
    for wait in (100, 500, 500):
        state.deliver(consumers, now, 10)
        counts.append(consumers.sent[-1].deliveries)
        now += TIMEOUT
        assert state.reap(now) == 1 and seq in state.delayed and not state.has_work()
        state.deliver(consumers, now + wait - 1, 10)
        assert len(consumers.sent) == len(counts)  # not before its wait is over
        now += wait
    state.deliver(consumers, now, 10)
    assert counts + [consumers.sent[-1].deliveries] == [1, 2, 3, 4]
    assert state.lowest_open() == seq  # out or waiting, never passed over


def test_a_late_ack_removes_a_delivery_waiting_out_its_backoff(store):
    state = new_state(store, DeliverySettings(TIMEOUT, 10_000, backoff_us=(10_000,)),
                      Counters())
    (seq,) = stored(store, 1)
    state.deliver(Consumers(), 0, 10)
    state.reap(TIMEOUT)
    assert seq in state.delayed
    ack(state, seq)
    assert store.messages == 0 and not state.delayed
    consumers = Consumers()
    state.deliver(consumers, 10 * TIMEOUT + 10_000, 10)
    assert consumers.sent == []
