"""A named group's done that reaches a holder before its copy: remembered, and the
copy is marked when it comes (the holder's takeover serves that group nothing)."""

from __future__ import annotations

import pytest
import structlog

from pzq.errors import StoreError
from pzq.protocol.cluster import DefaultReads, GroupReads
from pzq.store import keyspace, record, replicas
from pzq.store.replicas import ReplicaStore
from pzq.store.store import Store
from tests.support.stored import FailNext

ORIGIN = b"0123abcd"
HOLDERS = (b"4567efgh", b"89abijkl")
GROUPS = DefaultReads("default", groups={"orders": (GroupReads("g1"), GroupReads("g2"))})
COPY = record.encode(b"m", (b"TOPIC:orders",), (b"m",), 1)


@pytest.fixture
def held(tmp_path):
    store = Store.open(tmp_path / "node")
    copies = ReplicaStore(store)
    store.register(copies)
    batch = store.begin()
    copies.describe_topics(batch, ORIGIN, GROUPS)
    store.commit(batch)
    yield store, copies
    store.close()


def in_one_batch(store: Store, change) -> None:
    batch = store.begin()
    change(batch)
    store.commit(batch)


def done_by_a_taker(store: Store, copies: ReplicaStore, seq: int, group: str,
                    now: float = 1000.0) -> None:
    """A DONE from a node that took the origin over, as the holder applies it at ``now``."""
    in_one_batch(store, lambda batch: copies.group_done(batch, ORIGIN, seq, group, False,
                                                        remember_at=now))


def copy_comes(store: Store, copies: ReplicaStore, seq: int = 0) -> None:
    """The copy comes in a REPLICATE, as the holder applies it."""
    batch = store.begin()
    copies.add(batch, ORIGIN, seq, HOLDERS, COPY)
    if copies.early_dones:
        copies.mark_late_copies(batch, ORIGIN, [seq])
    store.commit(batch)


def test_a_copy_that_comes_after_its_group_s_done_is_marked(held):
    store, copies = held
    done_by_a_taker(store, copies, 0, "g1")
    assert copies.early_dones.get((ORIGIN, 0), set()) == {"g1"}
    copy_comes(store, copies)
    assert copies.is_done(ORIGIN, 0, "g1") and not copies.is_done(ORIGIN, 0, "g2")
    assert copies.counts[ORIGIN] == 1 and (ORIGIN, 0) not in copies.early_dones
    assert ReplicaStore(store).is_done(ORIGIN, 0, "g1")  # stored, as a DONE's mark is


def test_a_done_not_to_remember_is_not(held):
    """The origin's own DONE: it sends no copy after it."""
    store, copies = held
    in_one_batch(store, lambda batch: copies.group_done(batch, ORIGIN, 0, "g1", False))
    copy_comes(store, copies)
    assert (ORIGIN, 0) not in copies.early_dones and not copies.is_done(ORIGIN, 0, "g1")


def test_a_copy_every_group_finished_before_it_came_is_not_kept(held):
    store, copies = held
    for group in ("g1", "g2", "default"):
        done_by_a_taker(store, copies, 0, group)
    for _ in range(2):  # and a copy sent again is dropped too
        copy_comes(store, copies)
        assert copies.counts[ORIGIN] == 0 and not copies.holds(ORIGIN, 0)
    for prefix in (keyspace.REPLICA_PREFIX, keyspace.REPLICA_DONE_PREFIX):  # nor marks
        assert list(store.iterate(prefix)) == []


def test_a_remove_of_the_message_forgets_its_dones(held):
    store, copies = held
    done_by_a_taker(store, copies, 0, "g1")
    in_one_batch(store, lambda batch: copies.remove(batch, ORIGIN, 0, False))
    assert (ORIGIN, 0) not in copies.early_dones
    done_by_a_taker(store, copies, 1, "g1")
    copies.remember_removed(ORIGIN, [1])  # removed by a node that took the origin over
    assert (ORIGIN, 1) not in copies.early_dones


def test_dones_are_kept_for_a_copy_whose_batch_failed(held):
    store, copies = held
    failing = FailNext()
    store.register(failing)
    done_by_a_taker(store, copies, 0, "g1")
    failing.armed = True
    with pytest.raises(StoreError):
        copy_comes(store, copies)
    assert copies.early_dones.get((ORIGIN, 0), set()) == {"g1"} and not copies.holds(ORIGIN, 0)
    copy_comes(store, copies)
    assert copies.is_done(ORIGIN, 0, "g1")


def test_past_the_limit_the_oldest_are_forgotten_and_said(held, monkeypatch):
    store, copies = held
    monkeypatch.setattr(replicas, "REMEMBERED_DONES", 2)
    with structlog.testing.capture_logs() as logged:
        for seq in range(4):
            done_by_a_taker(store, copies, seq, "g1")
        # said once a minute at most, by the time passed in
        done_by_a_taker(store, copies, 4, "g1", 1000.0 + replicas.FORGOTTEN_SAID_EVERY_S - 1)
        done_by_a_taker(store, copies, 5, "g1", 1000.0 + replicas.FORGOTTEN_SAID_EVERY_S)
    assert [copies.early_dones.get((ORIGIN, seq), set()) for seq in range(6)] == [
        set(), set(), set(), set(), {"g1"}, {"g1"}]
    assert copies.dones_forgotten == 4
    assert [(line["event"], line["total"]) for line in logged] == [
        ("early_dones_forgotten", 1), ("early_dones_forgotten", 4)]
