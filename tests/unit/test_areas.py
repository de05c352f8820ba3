"""One contract, run against every store area a delivery state delivers from: this
node's own messages, and the copies of a down node that this node took over."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pzq.delivery.areas import Area, OwnArea, TakeoverArea
from pzq.store import record
from pzq.store.replicas import ReplicaStore
from pzq.store.store import Store

pytestmark = pytest.mark.timeout(20)
ORIGIN = b"0a0b0c0d"


@dataclass
class Filled:
    store: Store
    area: Area
    seqs: list[int]


def own_area(store: Store, count: int) -> Filled:
    batch = store.begin()
    seqs = [batch.add_message(record.encode(b"m%d" % i, (), (b"body %d" % i,), 1))
            for i in range(count)]
    store.commit(batch)
    return Filled(store, OwnArea(store), seqs)


def takeover_area(store: Store, count: int) -> Filled:
    replicas = ReplicaStore(store)
    store.register(replicas)
    batch = store.begin()
    seqs = [10 + 3 * i for i in range(count)]  # the origin's own numbering, with gaps
    for i, seq in enumerate(seqs):
        replicas.add(batch, ORIGIN, seq, (store.node_id,),
                     record.encode(b"m%d" % i, (), (b"body %d" % i,), 1))
    store.commit(batch)
    return Filled(store, TakeoverArea(replicas, ORIGIN, lambda seq, holders: True), seqs)


@pytest.fixture(params=[own_area, takeover_area], ids=["own", "takeover"])
def filled(request: pytest.FixtureRequest, tmp_path) -> Iterator[Filled]:
    fill: Callable[[Store, int], Filled] = request.param
    store = Store.open(tmp_path / "db")
    yield fill(store, 5)
    store.close()


def seqs_read(area: Area, start: int) -> list[int]:
    return [seq for seq, _ in area.read(start, 100).found]


def bodies(pairs: list[tuple[int, bytes]]) -> list[bytes]:
    return [record.decode(value).parts[0] for _, value in pairs]


def test_reads_in_arrival_order_from_any_start(filled):
    area, seqs = filled.area, filled.seqs
    assert seqs_read(area, 0) == seqs
    assert bodies(area.read(0, 2).found) == [b"body 0", b"body 1"]
    assert seqs_read(area, seqs[2]) == seqs[2:]
    chunk = area.read(area.end_seq(), 100)
    assert (chunk.found, chunk.next_seq) == ([], area.end_seq())
    assert area.end_seq() > seqs[-1]


def test_a_read_says_where_the_next_one_starts(filled):
    """Past what it found, and no further than what it looked at."""
    area, seqs = filled.area, filled.seqs
    assert seqs[1] < area.read(0, 2).next_seq <= seqs[2]
    assert area.read(0, 100).next_seq == area.end_seq()


def test_get_finds_stored_records_only(filled):
    area, seqs = filled.area, filled.seqs
    assert record.decode(area.get(seqs[3])).parts == (b"body 3",)
    assert area.get(seqs[-1] + 1000) is None


def test_delete_takes_a_message_out(filled):
    store, area, seqs = filled.store, filled.area, filled.seqs
    value = area.get(seqs[1])
    batch = store.begin()
    area.delete(batch, seqs[1], len(value))
    store.commit(batch)
    assert area.get(seqs[1]) is None
    assert seqs_read(area, 0) == seqs[:1] + seqs[2:]


def test_dead_letter_keeps_the_message_out_of_delivery_but_stored(filled):
    store, area, seqs = filled.store, filled.area, filled.seqs
    value = record.with_bookkeeping(area.get(seqs[0]), 5, 3)
    batch = store.begin()
    area.dead_letter(batch, seqs[0], value)
    store.commit(batch)
    assert area.get(seqs[0]) is None
    assert store.dead_letters == 1
    assert seqs_read(area, 0) == seqs[1:]


def test_rewritten_bookkeeping_leaves_the_message_deliverable(filled):
    store, area, seqs = filled.store, filled.area, filled.seqs
    batch = store.begin()
    area.rewrite(batch, seqs[2], record.with_bookkeeping(area.get(seqs[2]), 7, 1))
    store.commit(batch)
    assert record.decode(area.get(seqs[2])).parts == (b"body 2",)
    assert seqs_read(area, 0) == seqs
