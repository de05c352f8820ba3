"""The de-duplication ids let go at the reaper's tick (pzq.store.dedup): the index is
read only when an id stored may be past the window, on a real store."""

from __future__ import annotations

from pathlib import Path

from pzq.store import keyspace
from pzq.store.dedup import DedupIndex
from pzq.store.store import Store


def stored_ids(store: Store) -> list[bytes]:
    return [keyspace.split_dedup_age_key(key)[2]
            for key, _ in store.iterate(keyspace.DEDUP_AGE_PREFIX, values=False)]


def opened(path: Path) -> tuple[Store, DedupIndex]:
    store = Store.open(path)
    index = DedupIndex(store)
    store.register(index)
    return store, index


def test_a_tick_before_the_oldest_id_reads_nothing(tmp_path):
    store, index = opened(tmp_path / "db")
    assert not stored_ids(store)
    index.expire(before_us=100)  # not known yet: looked at once
    assert not index.idle
    store.commit(store.begin())
    index.expire(before_us=200)  # an empty index: nothing to read, nothing to write
    assert index.idle
    batch = store.begin()
    index.remember(batch, 7, b"a", 300, seen_before=None)
    index.remember(batch, 7, b"b", 500, seen_before=None)
    store.commit(batch)
    index.expire(before_us=300)  # the oldest is 300: none is past the window
    assert index.idle
    index.expire(before_us=301)
    assert not index.idle
    store.commit(store.begin())
    assert stored_ids(store) == [b"b"]
    index.expire(before_us=500)  # "b" at 500, learnt from the read
    assert index.idle
    store.close()


def test_an_id_of_the_batch_that_reads_counts_as_the_oldest(tmp_path):
    store, index = opened(tmp_path / "db")
    batch = store.begin()
    index.remember(batch, 7, b"a", 900, seen_before=None)
    store.commit(batch)
    index.expire(before_us=100)
    batch = store.begin()
    index.remember(batch, 7, b"b", 50, seen_before=None)  # (a clock set back, say)
    store.commit(batch)
    index.expire(before_us=60)
    assert not index.idle
    store.commit(store.begin())
    assert stored_ids(store) == [b"a"]
    store.close()


def test_after_a_restart_the_index_is_read_again(tmp_path):
    store, index = opened(tmp_path / "db")
    batch = store.begin()
    index.remember(batch, 7, b"a", 300, seen_before=None)
    store.commit(batch)
    index.expire(before_us=100)
    store.commit(store.begin())
    assert index.idle
    store.close()
    store, index = opened(tmp_path / "db")
    index.expire(before_us=400)  # what is stored is not known: read
    assert not index.idle
    store.commit(store.begin())
    assert stored_ids(store) == []
    store.close()
