"""The store's batch is made once: each one written is the next one begun, emptied
then (no batch and no LevelDB write batch made a wake), and what it held is written
once; a failed one is not begun again, and a batch begun while one is open gets its
own."""

from __future__ import annotations

from pathlib import Path

import pytest

from pzq.errors import StoreError
from pzq.store import keyspace
from pzq.store.store import Store
from tests.support.stored import FailNext


def own_values(store: Store) -> list[bytes]:
    return [value for _, value in store.iterate(keyspace.OWN_PREFIX)]


def test_the_batch_written_is_the_next_one_begun(tmp_path: Path):
    store = Store.open(tmp_path / "db")
    try:
        first = store.begin()
        raw = first._batch
        first.add_message(b"one")
        store.commit(first)
        assert first.operations == 1  # (read until the next begins)
        second = store.begin()
        assert second is first and second._batch is raw
        assert (second.operations, second.message_delta, second.byte_delta) == (0, 0, 0)
        second.add_message(b"two")
        store.commit(second)
        assert store.begin() is first
        assert own_values(store) == [b"one", b"two"]  # each written once
        assert (store.messages, store.bytes, store.next_seq) == (2, 6, 2)
    finally:
        store.close()


def test_a_failed_batch_is_not_begun_again(tmp_path: Path):
    store = Store.open(tmp_path / "db")
    failing = FailNext()
    store.register(failing)
    try:
        store.commit(store.begin())  # (an empty one: the spare)
        failed = store.begin()
        failed.add_message(b"lost")
        failing.armed = True
        with pytest.raises(StoreError):
            store.commit(failed)
        batch = store.begin()
        assert batch is not failed and batch.operations == 0
        batch.add_message(b"kept")
        store.commit(batch)
        assert own_values(store) == [b"kept"]
        assert store.messages == 1
    finally:
        store.close()


def test_a_batch_begun_while_one_is_open_gets_its_own(tmp_path: Path):
    store = Store.open(tmp_path / "db")
    try:
        store.commit(store.begin())
        outer = store.begin()
        inner = store.begin()
        assert inner is not outer and inner._batch is not outer._batch
        outer.add_message(b"outer")
        inner.add_message(b"inner")
        store.commit(inner)
        store.commit(outer)
        assert sorted(own_values(store)) == [b"inner", b"outer"]
        assert store.begin().operations == 0
    finally:
        store.close()


def test_any_between_is_whether_a_key_lies_in_the_half_open_range(tmp_path):
    store = Store.open(tmp_path / "db")
    try:
        batch = store.begin()
        batch.put(b"r" + b"\x00\x05", b"")
        store.commit(batch)
        assert store.any_between(b"r\x00\x05", b"r\x00\x06")  # its first key
        assert store.any_between(b"r\x00\x00", b"r\x00\x09")
        assert not store.any_between(b"r\x00\x00", b"r\x00\x05")  # the end left out
        assert not store.any_between(b"r\x00\x06", b"r\x01")
    finally:
        store.close()
