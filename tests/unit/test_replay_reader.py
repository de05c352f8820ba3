"""The replays' reader over a real store and a real archive, in process: a chunk a
wake within the rate, a batch that fails to write reads the same records again (no
gap, no repeat), and the position and counts come back from the store."""

from __future__ import annotations

import os

import pytest

from pzq.archive.contract import NoLogs
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.archive import Archive
from pzq.clock import Now
from pzq.delivery.replay_area import READ, READING
from pzq.delivery.settings import DeliverySettings
from pzq.errors import StoreError
from pzq.events import EventHub
from pzq.replay.part import Replays
from pzq.replay.range import Bound, parse_bound, resolve
from pzq.store import keyspace, record
from pzq.store.store import Store
from pzq.store.topics import Topics
from tests.support.stored import FailNext

SETTINGS = DeliverySettings(30_000_000, 1 << 20, 0)


def archive_of(path, count: int, stored_from_us: int = 1_000) -> Archive:
    archive = Archive(path)
    archive.open(1.0)
    for number in range(count):
        archive.append(ArchivedMessage(b"0a1b2c3d-%016x" % number, b"id%d" % number, "orders",
                                       stored_from_us + number, 2, 3, 1, "0a1b2c3d",
                                       (b"m%d" % number,), headers=(b"TAG:eu",)), 1.0)
    return archive


def opened(tmp_path, archive: Archive, rate: int = 1000):
    store = Store.open(tmp_path / "db")
    topics = Topics(store, "default")
    store.register(topics)
    failing = FailNext()
    store.register(failing)
    batch = store.begin()
    group = topics.add_group(topics.topic("orders", 1), "g", 0, "", 1)
    store.commit(batch)
    replays = Replays(store, topics, archive, SETTINGS, rate, EventHub())
    return store, topics, group, replays, failing


def wake(store: Store, replays: Replays, mono: float) -> None:
    batch = store.begin()
    replays.finish(batch, Now(1, mono))
    try:
        store.commit(batch)
    except StoreError:
        pass


def stored_bodies(store: Store, replay_id: bytes) -> list[bytes]:
    return [record.decode(value).parts[0]
            for _, value in store.iterate(keyspace.replay_prefix(replay_id))]


def test_a_failed_batch_reads_the_same_records_again(tmp_path):
    archive = archive_of(tmp_path / "archive", 30)
    store, _, group, replays, failing = opened(tmp_path, archive, rate=10)
    replays.start(Now(1, 0.0))
    answer = replays.begin(group, Bound(offset=0), None, {"from": "earliest"}, Now(1, 0.0))
    assert ": 30 messages from archive byte offset 0 to " in answer
    (replay,) = replays.replays.values()
    wake(store, replays, 1.0)  # a second of the rate: 10
    assert (replay.record.written, len(stored_bodies(store, replay.area.node_id))) == (10, 10)
    failing.armed = True
    wake(store, replays, 2.0)  # read, but not written: undone
    assert replay.record.written == 10 and replay.area.left == 10
    wake(store, replays, 3.0)
    wake(store, replays, 4.0)
    assert stored_bodies(store, replay.area.node_id) == [b"m%d" % n for n in range(30)]
    assert (replay.record.state, replay.record.position) == (READ, archive.log("orders")
                                                              .end_offset)
    value = store.get(keyspace.replay_key(replay.area.node_id, 0))
    assert record.decode(value).headers == (b"TOPIC:orders", b"TAG:eu")  # as produced
    store.close()


def test_a_restart_goes_on_from_the_stored_position(tmp_path):
    archive = archive_of(tmp_path / "archive", 30)
    store, _, group, replays, _ = opened(tmp_path, archive, rate=10)
    replays.start(Now(1, 0.0))
    replays.begin(group, Bound(offset=0), None, {"from": "earliest"}, Now(1, 0.0))
    wake(store, replays, 1.0)
    (before,) = replays.replays.values()
    store.close()
    store, _, group, replays, _ = opened(tmp_path, archive, rate=10)
    (after,) = replays.replays.values()
    assert (after.record.id, after.record.written, after.record.position, after.record.state) \
        == (before.record.id, 10, before.record.position, READING)
    assert after.area.left == 10 and after.state is not None
    store.close()


@pytest.mark.parametrize("text, bound", [
    ("earliest", Bound(offset=0)), ("1234", Bound(offset=1234)),
    ("1764000000000000", Bound(time_us=1_764_000_000_000_000)),
    ("2025-11-24T16:00:00Z", Bound(time_us=1_764_000_000_000_000)),
    ("2025-11-24T16:00:00", Bound(time_us=1_764_000_000_000_000)),  # UTC without a zone
    ("2025-11-24T17:00:00+01:00", Bound(time_us=1_764_000_000_000_000)),
])
def test_a_bound_is_an_offset_or_a_time(text, bound):
    assert parse_bound(text, "from", earliest_ok=True) == bound


def test_a_long_range_is_estimated_and_said_so(tmp_path, monkeypatch):
    archive = archive_of(tmp_path / "archive", 300)
    monkeypatch.setattr("pzq.replay.range.COUNT_EXACT_BYTES", 4096)  # counted up to 4 KiB
    monkeypatch.setattr("pzq.replay.range.SAMPLE_BYTES", 2048)
    store, _, group, replays, _ = opened(tmp_path, archive, rate=100_000)
    replays.start(Now(1, 0.0))
    answer = replays.begin(group, Bound(offset=0), None, {"from": "earliest"}, Now(1, 0.0))
    about = int(answer.split("about ")[1].split()[0])
    assert "messages (an estimate) from archive byte offset 0" in answer and 250 <= about <= 350
    (replay,) = replays.replays.values()
    assert " left=~" in replay.line()
    for second in range(1, 5):
        wake(store, replays, float(second))
    assert (replay.record.expected, replay.record.estimated) == (300, False)  # read: exact
    store.close()


def test_a_replay_whose_archive_is_gone_stops_and_says_why(tmp_path):
    archive = archive_of(tmp_path / "archive", 30)
    store, _, group, replays, _ = opened(tmp_path, archive, rate=10)
    replays.start(Now(1, 0.0))
    replays.begin(group, Bound(offset=0), None, {"from": "earliest"}, Now(1, 0.0))
    wake(store, replays, 1.0)
    store.close()
    store = Store.open(tmp_path / "db")  # started again without --archive-dir
    topics = Topics(store, "default")
    replays = Replays(store, topics, NoLogs(), SETTINGS, 10, EventHub())
    replays.start(Now(1, 0.0))
    wake(store, replays, 5.0)
    (replay,) = replays.replays.values()
    # it said "the archive has no topic orders", as if the topic alone were missing
    assert replay.line().endswith("state=stopped (this node has no --archive-dir)")
    assert replays.timeout_ms(Now(1, 6.0)) is None  # no wake for a reader that cannot read
    assert replay.state is not None and replay.area.left == 10  # what it read is delivered
    store.close()


def test_a_segment_whose_coarse_mtime_runs_behind_is_still_read(tmp_path):
    """A file's mtime comes from the kernel's coarse clock, milliseconds behind the
    store times of the records written to it: the segment is not skipped for that."""
    written_us = 1_700_000_000_000_000
    archive = archive_of(tmp_path / "archive", 3, stored_from_us=written_us + 4_000)
    (segment,) = archive.log("orders").segments
    os.utime(segment.path, ns=(written_us * 1000, written_us * 1000))
    found = resolve(archive.log("orders"), Bound(time_us=written_us + 4_000), None,
                    lambda tag: True)
    assert (found.start, found.expected, found.estimated) == (0, 3, False)
