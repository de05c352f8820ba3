"""Record format, key layout and the LevelDB store, on a real database."""

from __future__ import annotations

import pytest

from pzq.errors import DecodeError, StoreError
from pzq.protocol.frame_groups import LENGTH, group_chunks
from pzq.protocol.message_keys import message_key, parse_message_key
from pzq.store import keyspace, record
from pzq.store.store import Store

pytestmark = pytest.mark.timeout(20)


def test_record_round_trip_and_bookkeeping_splice():
    value = record.encode(b"m1", (b"TOPIC:x",), (b"a", b"", b"c" * 300), stored_us=42)
    stored = record.decode(value)
    assert stored == record.Record(b"m1", (b"TOPIC:x",), (b"a", b"", b"c" * 300), 42, 0, 0)
    spliced = record.with_bookkeeping(value, 99, 3)
    assert len(spliced) == len(value)
    assert record.bookkeeping(spliced) == (99, 3)
    assert record.decode(spliced).parts == stored.parts


def test_a_record_of_one_part_without_headers_has_the_layout_of_every_record():
    """Such a record (most messages sent alone) is packed in one step of its own."""
    for msg_id, part in ((b"m1", b"body"), (b"", b""), (b"id" * 40, b"x" * 70_000)):
        value = record.encode(msg_id, (), (part,), stored_us=7)
        assert value == b"".join([record.FIXED.pack(record.VERSION, 7, 0, 0),
                                  LENGTH.pack(len(msg_id)), msg_id, *group_chunks(()),
                                  *group_chunks((part,))])
        assert record.decode(value) == record.Record(msg_id, (), (part,), 7, 0, 0)


@pytest.mark.parametrize("cut", [0, 5, 21, 30, -1])
def test_truncated_record_is_a_decode_error(cut):
    value = record.encode(b"m1", (), (b"body",), stored_us=1)
    with pytest.raises(DecodeError):
        record.decode(value[:cut])


def test_record_with_trailing_bytes_is_a_decode_error():
    with pytest.raises(DecodeError):
        record.decode(record.encode(b"m", (), (b"b",), 1) + b"x")


def test_part_groups_of_many_records_are_each_ones_part_group():
    """A run's part groups, read in passes over all the records: records with as many
    headers each (a topic's), with different counts, none, and a truncated one."""
    alike = [record.encode(b"m%d" % i, (b"TOPIC:t", b"TAG:%d" % i), (b"x" * i, b"y"), 1)
             for i in range(20)]
    mixed = [record.encode(b"id" * i, (b"h" * i,) * (i % 3), (b"p%d" % i,), 1)
             for i in range(20)]
    for values in (alike, mixed, [], alike[:1]):
        assert record.part_groups(values) == [
            value[record.part_group_at(value):] for value in values]
    with pytest.raises(DecodeError):
        record.part_groups([*alike[:2], alike[2][:record.part_group_at(alike[2]) + 2]])


@pytest.mark.parametrize("odd_at", [0, 1, 9, 19])
def test_part_groups_of_records_of_one_shape_but_one_are_each_ones_part_group(odd_at):
    """Records of one shape (cut at one place) with one of another shape anywhere: a
    longer msg id, a header of another length, another part count, more headers, or
    truncated."""
    shaped = [record.encode(b"m%03d" % i, (b"TOPIC:t", b"TAG:a"), (b"x" * i,), 1)
              for i in range(20)]
    assert record.part_groups(shaped) == [value[record.part_group_at(value):]
                                          for value in shaped]
    for odd in (record.encode(b"m0001", (b"TOPIC:t", b"TAG:a"), (b"x",), 1),
                record.encode(b"m001", (b"TOPIC:t", b"TAG:ab"), (b"x",), 1),
                record.encode(b"m001", (b"TOPIC:t", b"TAG:a"), (b"x", b"y"), 1),
                record.encode(b"m001", (b"TOPIC:t", b"TAG:a", b"K:v"), (b"x",), 1),
                record.encode(b"m001", (b"TOPIC:t",), (b"TAG:a", b"x"), 1)):
        values = [*shaped[:odd_at], odd, *shaped[odd_at + 1:]]
        assert record.part_groups(values) == [value[record.part_group_at(value):]
                                              for value in values]
    truncated = shaped[odd_at][:record.part_group_at(shaped[odd_at]) + 2]
    with pytest.raises(DecodeError):
        record.part_groups([*shaped[:odd_at], truncated, *shaped[odd_at + 1:]])


def test_message_keys():
    key = message_key(b"0a1b2c3d", 2**40 + 5)
    assert key == b"0a1b2c3d-0000010000000005"
    assert parse_message_key(key) == (b"0a1b2c3d", 2**40 + 5)
    for bad in (b"", b"0a1b2c3d-000001000000000", b"0a1b2c3d_0000010000000005",
                b"0A1B2C3D-0000010000000005", b"0a1b2c3d-+000010000000005",
                b"0a1b2c3d-0000_10000000005"):
        with pytest.raises(DecodeError):
            parse_message_key(bad)


def test_own_keys_sort_in_arrival_order():
    keys = [keyspace.own_key(seq) for seq in (0, 1, 255, 256, 2**32, 2**63)]
    assert keys == sorted(keys)
    assert all(keyspace.own_seq(key) == seq for key, seq in zip(keys, (0, 1, 255, 256,
                                                                      2**32, 2**63), strict=False))


@pytest.mark.parametrize("first, count", [(0, 1), (255, 127), (2**32 - 3, 128),
                                          (7, 129), (2**63 - 400, 399), (0, 0), (200, 56),
                                          (200, 57), (256, 256), (250, 600)])
def test_a_runs_own_keys_made_together_are_each_ones_key(first, count):
    seqs = range(first, first + count)
    assert list(keyspace.own_keys_of_run(seqs)) == [keyspace.own_key(seq) for seq in seqs]
    # an ACK's seqs: in any order, one of them twice
    acked = [*seqs[::-2], first]
    assert list(keyspace.own_keys(acked)) == [keyspace.own_key(seq) for seq in acked]


def test_a_prefix_ending_in_255_has_an_end(tmp_path):
    assert keyspace.prefix_end(b"a\x00\x01") == b"a\x00\x02"
    assert keyspace.prefix_end(b"a\x00\xff\xff") == b"a\x01"
    store = Store.open(tmp_path / "db")
    batch = store.begin()
    for group_id, seq in ((255, 1), (255, 2), (256, 1)):  # a group id ending in 255
        batch.put(keyspace.group_done_key(group_id, seq), b"")
    store.commit(batch)
    assert [keyspace.seq_at_end(key) for key, _ in
            store.iterate(keyspace.group_done_prefix(255), values=False)] == [1, 2]
    store.close()


def test_store_batches_counters_and_reopen(tmp_path):
    store = Store.open(tmp_path / "db")
    node_id = store.node_id
    batch = store.begin()
    seqs = [batch.add_message(b"v%d" % i) for i in range(5)]
    store.commit(batch)
    assert (store.messages, store.bytes, store.syncs) == (5, 10, 1)
    batch = store.begin()
    batch.delete_message(seqs[0], 2)
    store.commit(batch)
    assert [seq for seq, _ in store.read_own(0, 10)] == seqs[1:]
    assert store.read_own(seqs[2], 2) == [(seqs[2], b"v2"), (seqs[3], b"v3")]
    store.close()

    reopened = Store.open(tmp_path / "db")
    assert reopened.node_id == node_id
    assert (reopened.messages, reopened.bytes) == (4, 8)
    assert reopened.next_seq == seqs[-1] + 1
    reopened.close()


def test_store_refuses_a_second_opener(tmp_path):
    store = Store.open(tmp_path / "db")
    with pytest.raises(StoreError, match="in use by another process"):
        Store.open(tmp_path / "db")
    store.close()


def test_write_to_a_closed_store_is_a_store_error(tmp_path):
    store = Store.open(tmp_path / "db")
    batch = store.begin()
    batch.add_message(b"v")
    store.close()
    with pytest.raises(StoreError):
        store.commit(batch)


def test_a_reverse_walk_meets_damage_as_every_read_does(tmp_path):
    """Every read checks checksums and names the repair; the reverse walk (a group's
    highest mark) read without them, past a damaged block or into a raw LevelDB error."""
    import os

    from pzq.errors import StoreDamaged

    path = tmp_path / "db"
    store = Store.open(path)
    prefix = keyspace.group_done_prefix(1)
    batch = store.begin()
    for seq in range(3000):
        batch.put(keyspace.group_done_key(1, seq), os.urandom(200))  # not compressible
    store.commit(batch)
    for _ in range(2):  # a store reopened turns its log into a table
        store.close()
        store = Store.open(path)
    table = max(path.glob("*.ldb"), key=lambda found: found.stat().st_size)
    data = bytearray(table.read_bytes())
    data[len(data) // 2:len(data) // 2 + 16] = b"\xff" * 16
    table.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged, match="pzq-ctl repair"):
        list(store.iterate_reverse(prefix))
    store.close()


def test_a_snapshot_copy_holds_the_store_as_it_was_when_taken(tmp_path):
    import plyvel

    from pzq.store.snapshot_copy import SLICE_KEYS, CopyWriter, SnapshotSlices

    def everything(db: plyvel.DB) -> dict[bytes, bytes]:
        return dict(db.iterator())

    store = Store.open(tmp_path / "db")
    batch = store.begin()
    seqs = [batch.add_message(b"m%d" % n) for n in range(SLICE_KEYS + 10)]
    store.commit(batch)
    before = everything(store._db)
    slices = SnapshotSlices(store)
    batch = store.begin()  # written while the copy is read: not in it
    batch.add_message(b"later")
    batch.delete_message(seqs[0], 2)
    store.commit(batch)
    copy = CopyWriter(tmp_path / "copy")
    sizes = []
    while items := slices.next_slice():
        sizes.append(len(items))
        copy.write(items)
    copy.close()
    store.close()
    assert sizes[0] == SLICE_KEYS and not slices.open
    copied = plyvel.DB(str(tmp_path / "copy"))
    try:
        assert everything(copied) == before
    finally:
        copied.close()
