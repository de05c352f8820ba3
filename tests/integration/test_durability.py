"""What reaches the disk, and when: the store's timed log sync (--sync-interval), the
archive's flush timer, and the directories of new files. Time is passed in; the
node tests (a node in this process, on loopback ports of its own) poll its figures
with a deadline."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import structlog

from pzq import fsync
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier import topiclog
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.archiving import Archiving
from pzq.archive.tier.tier import ArchiveSettings, ArchiveTier
from pzq.archive.tier.topiclog import TopicLog, list_segments
from pzq.client import Producer
from pzq.errors import ExitCode
from pzq.store import leveldb as leveldb_module
from pzq.store import record
from pzq.store import store as store_module
from pzq.store.log_sync import RUNNING_POLL_S, LogSync
from pzq.store.store import Store
from tests.support.harness import produce_and_consume, run_pzq, wait_until
from tests.support.held_sync import HeldSync

pytestmark = pytest.mark.timeout(30)


# -- the store's log: --sync-interval -----------------------------------------------------

def test_log_sync_is_due_an_interval_after_the_oldest_unsynced_write():
    sync = LogSync(hard=False, interval_s=1.0, now=10.0)
    assert not sync.due(10.0) and sync.wait_s(10.0) is None  # nothing to sync
    sync.written(False, 10.2)
    sync.written(False, 10.9)  # a later write does not push the deadline on
    assert sync.wait_s(11.0) == pytest.approx(0.2)
    assert not sync.due(11.1) and sync.due(11.2)
    assert sync.unsynced_s(11.2) == pytest.approx(1.0)
    sync.written(True, 11.2)
    assert sync.wait_s(11.3) is None and sync.unsynced_s(11.3) == 0
    assert sync.sync_age_s(11.7) == pytest.approx(0.5)


def test_a_failed_write_retries_the_sync_an_interval_later():
    sync = LogSync(hard=False, interval_s=1.0, now=0.0)
    sync.written(False, 0.0)
    sync.failed(1.0)
    assert not sync.due(1.5) and sync.wait_s(1.5) == pytest.approx(0.5)
    assert sync.due(2.0)


def test_a_running_sync_counts_for_the_writes_made_before_it_began():
    sync = LogSync(hard=False, interval_s=1.0, now=0.0)
    sync.written(False, 0.0)
    sync.began(1.0)
    assert sync.due(1.0) and sync.wait_s(1.0) == RUNNING_POLL_S  # a wake looks at it
    sync.written(False, 1.2)
    sync.finished(True, 1.3)
    assert sync.unsynced_since == 1.2 and sync.wait_s(1.3) == pytest.approx(0.9)
    assert sync.sync_age_s(1.3) == pytest.approx(0.3)
    sync.began(2.2)
    sync.finished(False, 2.4)  # failed: the same writes, an interval later
    assert sync.unsynced_since == 1.2 and sync.wait_s(2.4) == pytest.approx(1.0)


@pytest.mark.parametrize("hard, interval, synced", [
    (True, 0.0, [True, True, True]),  # --hard-sync: every batch
    (False, 0.0, [False, False, False]),  # --sync-interval 0: never by time
    (False, 1.0, [False, False, True]),  # the default: once a second has passed
])
def test_which_batches_sync_the_log(tmp_path, hard, interval, synced):
    store = Store.open(tmp_path / "db", hard_sync=hard, sync_interval_s=interval, now=0.0)
    seen = []
    for now in (0.0, 0.5, 1.0):
        store.wake_at(now)
        batch = store.begin()
        batch.add_message(b"m")
        seen.append(batch.sync)
        store.commit(batch)
    store.wait_for_sync()  # (the timed one runs beside the loop)
    assert seen == synced
    assert store.log_syncs == synced.count(True)
    store.close()


def test_an_idle_store_syncs_with_an_empty_batch_when_the_interval_passed(tmp_path):
    store = Store.open(tmp_path / "db", sync_interval_s=1.0, now=0.0)
    store.wake_at(0.0)
    batch = store.begin()
    batch.add_message(b"m")
    store.commit(batch)
    assert store.sync_wait_s() == pytest.approx(1.0)
    store.wake_at(0.4)
    store.commit(store.begin())  # nothing to write and nothing due: no write
    assert (store.syncs, store.log_syncs) == (1, 0)
    store.wake_at(1.0)
    assert store.sync_wait_s() == 0
    store.commit(store.begin())  # nothing new, but the earlier write is due
    store.wait_for_sync()
    assert (store.syncs, store.log_syncs) == (1, 1)  # the sync alone: no batch written
    assert store.sync_wait_s() is None and store.log_sync.unsynced_s(1.5) == 0
    store.wake_at(3.0)
    store.commit(store.begin())  # all synced: nothing to do
    assert (store.syncs, store.log_syncs) == (1, 1)
    store.close()
    reopened = Store.open(tmp_path / "db")
    assert reopened.messages == 1
    reopened.close()


def _write_one(store: Store, now: float) -> bool:
    """A wake at ``now`` that stores a message; whether its batch was a syncing one."""
    store.wake_at(now)
    batch = store.begin()
    batch.add_message(b"m")
    store.commit(batch)
    return batch.sync


def _wait_finished(store: Store) -> None:
    deadline = time.monotonic() + 10
    while not store.syncer.finished():
        assert time.monotonic() < deadline, "the sync did not finish"
        time.sleep(0.001)


def test_a_write_made_while_the_sync_runs_waits_for_the_next_one(tmp_path):
    store = Store.open(tmp_path / "db", sync_interval_s=1.0, now=0.0)
    held = HeldSync(store)
    _write_one(store, 0.0)
    store.wake_at(1.0)
    store.commit(store.begin())  # due: the sync starts in its thread, the wake goes on
    assert held.started.wait(10) and store.log_sync.running_since == 1.0
    assert _write_one(store, 1.2)  # while it runs (the archive fsyncs before it)
    assert store.log_syncs == 0 and store.log_sync.unsynced_s(1.2) == pytest.approx(1.2)
    held.release()
    _wait_finished(store)
    store.wake_at(1.3)
    store.commit(store.begin())  # a later wake takes the outcome: no write, no new sync
    assert store.log_syncs == 1 and not store.syncer.running
    assert store.log_sync.sync_age_s(1.3) == pytest.approx(0.3)  # synced as of its start
    # the write at 1.2 began after the sync did: it is the next one's, an interval on
    assert store.log_sync.unsynced_since == 1.2
    assert store.sync_wait_s() == pytest.approx(0.9)
    assert not _write_one(store, 1.5)
    store.wake_at(2.2)
    store.commit(store.begin())
    store.wait_for_sync()
    assert store.log_syncs == 2 and store.log_sync.unsynced_since is None
    assert store.sync_wait_s() is None
    store.close()


def test_a_failed_sync_is_logged_once_and_tried_again_an_interval_later(tmp_path):
    store = Store.open(tmp_path / "db", sync_interval_s=1.0, now=0.0)
    _write_one(store, 0.0)
    moved = tmp_path / "moved"
    (tmp_path / "db").rename(moved)  # the sync cannot open the directory: ENOENT
    with structlog.testing.capture_logs() as logged:
        for now in (1.0, 2.0):
            store.wake_at(now)
            store.commit(store.begin())
            store.wait_for_sync()
            assert store.log_syncs == 0 and store.log_sync.unsynced_since == 0.0
            store.wake_at(now + 0.5)
            assert store.sync_wait_s() == pytest.approx(0.5)  # an interval after it
    assert [entry["event"] for entry in logged] == ["store_log_sync_failed"]  # once
    moved.rename(tmp_path / "db")
    store.wake_at(3.0)
    store.commit(store.begin())
    store.wait_for_sync()
    assert store.log_syncs == 1 and store.log_sync.unsynced_since is None
    store.close()


def test_a_stop_waits_for_the_running_sync_and_syncs_what_came_after(tmp_path):
    store = Store.open(tmp_path / "db", sync_interval_s=1.0, now=0.0)
    held = HeldSync(store)
    _write_one(store, 0.0)
    store.wake_at(1.0)
    store.commit(store.begin())
    assert held.started.wait(10)
    _write_one(store, 1.1)
    held.release()
    store.close()
    assert store.log_syncs == 2 and store.log_sync.unsynced_since is None


def _produce(node, context, count: int) -> None:
    with Producer(node.receive_dsn, window=100, context=context) as producer:
        for i in range(count):
            assert producer.produce([b"m%d" % i]).ok


def test_an_idle_node_syncs_its_log_within_the_interval(start_inproc_node, context):
    node = start_inproc_node("--sync-interval", "200ms", consume=False, tcp=True)
    _produce(node, context, 3)
    # No other traffic wakes the node: it wakes for the sync on its own.
    stats = node.wait_stats(lambda s: s["log_syncs"] >= 1 and s["store_unsynced_s"] == 0,
                            message="the log synced by time")
    assert stats["store_sync_age_s"] < 10


def test_sync_interval_0_leaves_the_log_to_the_page_cache(start_inproc_node, context):
    node = start_inproc_node("--sync-interval", "0", consume=False, tcp=True)
    _produce(node, context, 3)
    stats = node.wait_stats(lambda s: s["store_unsynced_s"] >= 1.0,
                            message="an unsynced write a second old")
    assert stats["log_syncs"] == 0


@pytest.mark.parametrize("args, message", [
    (["--sync-interval=-1s"], "--sync-interval must be 0 or more"),
    (["--sync-interval", "soon"], "argument --sync-interval: soon is not a duration"),
])
def test_a_bad_sync_interval_is_one_line_and_exit_2(args, message):
    result = run_pzq(args)
    assert result.returncode == ExitCode.USAGE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pzq: error: ") and message in lines[0]


@pytest.mark.parametrize("content, message", [
    ('sync-interval = "-2s"\n', "pzq.toml: sync-interval must be 0 or more"),  # the file's key
    ("sync-interval = 0.5\n", 'give whole microseconds or a text with a unit, e.g. "0.5s"'),
    ("sync_interval = true\n", "sync_interval has the wrong type"),
])
def test_a_bad_sync_interval_in_the_config_file_is_exit_2(tmp_path, content, message):
    path = tmp_path / "pzq.toml"
    path.write_text(content)
    result = run_pzq(["--config", str(path)])
    assert result.returncode == ExitCode.USAGE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


# -- the archive: --flush-interval and rolls ----------------------------------------------

def archived(n: int, size: int = 10) -> ArchivedMessage:
    return ArchivedMessage(b"00000000-%016x" % n, b"m%d" % n, "orders", 1, 2, 3, 1, "00000000",
                           (b"x" * size,))


def test_the_archive_fsyncs_a_record_at_most_the_flush_interval_after_its_append(tmp_path):
    archive = Archive(tmp_path / "a", flush_messages=3, flush_interval_ms=1000)
    archive.open(0.0)
    assert archive.flush_wait_s(0.0) is None  # nothing to flush: no wake
    for now in (0.5, 0.8, 0.9):
        archive.append(archived(int(now * 10)), now)  # the third is fsync'd by count
    archive.append(archived(9), 0.95)
    assert archive.unsynced_s(1.5) == pytest.approx(0.55)
    # The loop wakes when told to (its poll timeout) until nothing waits: the record
    # appended at 0.95 is fsync'd at 1.95 (a timer every interval, counted from the
    # last fsync at 0.9, would have fsync'd it at 2.0 at the earliest).
    now, wakes = 0.95, []
    while (wait := archive.flush_wait_s(now)) is not None and len(wakes) < 5:
        now += wait
        assert archive.topics()["orders"].flushed_offset < archive.topics()["orders"].last_offset
        archive.tick(now)
        wakes.append(now)
    assert wakes[-1] == pytest.approx(1.95)
    info = archive.topics()["orders"]
    assert info.flushed_offset == info.last_offset
    assert archive.unsynced_s(now) == 0
    assert archive.fsync_age_s(2.5) == pytest.approx(0.55)
    archive.close(3.0)


def test_each_topic_is_fsynced_by_its_own_oldest_record(tmp_path):
    archive = Archive(tmp_path / "a", flush_interval_ms=1000)
    archive.open(0.0)
    archive.append(archived(1), 0.0)
    archive.append(dataclasses.replace(archived(2), topic="clicks"), 0.6)
    archive.tick(1.0)
    topics = archive.topics()
    assert topics["orders"].flushed_offset == topics["orders"].last_offset
    assert topics["clicks"].flushed_offset == 0
    assert archive.flush_wait_s(1.0) == pytest.approx(0.6)  # clicks' record came at 0.6
    archive.tick(1.6)
    assert archive.unsynced_s(1.6) == 0
    archive.close(2.0)


def test_a_roll_fsyncs_the_old_segment_and_the_new_name(tmp_path, monkeypatch):
    synced_directories = spy_directory_syncs(monkeypatch, topiclog)
    log = TopicLog(tmp_path / "t", segment_size=100, flush_messages=1000, flush_interval_s=1)
    log.open(now=0)
    synced_directories.clear()
    offsets = [log.append(archived(i).frames(), now=0) for i in range(4)]
    segments = list_segments(tmp_path / "t")
    assert len(segments) > 1, "the records should have rolled the log"
    assert log.flushed_offset == segments[-1].start  # the old segments, whole
    assert synced_directories == [tmp_path / "t"] * (len(segments) - 1)
    assert log.unsynced_since == 0  # the records of the new segment wait for the timer
    log.close(now=0)
    assert offsets[-1] >= segments[-1].start


def spy_directory_syncs(monkeypatch, *modules) -> list[Path]:
    """The directories ``modules`` fsync, each fsync still done for real."""
    synced: list[Path] = []
    real = fsync.sync_directory

    def sync_directory(directory: Path) -> None:
        synced.append(Path(directory))
        real(directory)

    for module in modules:
        monkeypatch.setattr(module, "sync_directory", sync_directory)
    return synced


def test_new_topic_and_archive_directories_are_fsynced_in_their_parents(tmp_path,
                                                                        monkeypatch):
    synced = spy_directory_syncs(monkeypatch, fsync)
    archive = Archive(tmp_path / "new" / "archive")
    archive.open(0.0)
    archive.append(archived(1), 0.0)
    archive.close(1.0)
    assert tmp_path in synced and tmp_path / "new" in synced  # "new", then "archive"
    assert tmp_path / "new" / "archive" in synced  # the topic directory "orders"


def test_a_raw_topics_marker_is_fsynced_in_its_directory(tmp_path, monkeypatch):
    synced = spy_directory_syncs(monkeypatch, topiclog)
    archive = Archive(tmp_path / "a")
    archive.open(0.0)
    archive.append_raw("clicks", [[b"payload"]], 0.0)
    assert synced.count(tmp_path / "a" / "clicks") == 2  # the first segment, the marker
    archive.close(1.0)


def test_the_archive_node_reports_its_fsync_ages(start_inproc_node, context, tmp_path):
    node = start_inproc_node("--archive-dir", str(tmp_path / "archive"), "--flush-interval",
                             "300", "--ack-timeout", "60s", consume=False, tcp=True)
    produce_and_consume(node, context, 3)
    # An unsynced_s of 0 alone is no fsync: a STATS in the wake of the append says 0 too.
    stats = node.wait_stats(
        lambda s: s["archive"]["archived"] == 3 and all(
            s["archive"]["topics"].get(topic, {}).get("flushed_offset", 0)
            == s["archive"]["topics"][topic]["last_offset"] > 0 for topic in ("even", "odd")),
        message="the archived messages fsync'd by the flush timer")
    assert stats["archive"]["unsynced_s"] == 0
    assert 0 <= stats["archive"]["fsync_age_s"] < 10


# -- LevelDB's directory ----------------------------------------------------------------------

def test_leveldbs_new_names_are_fsynced_in_their_directory(tmp_path, monkeypatch):
    synced = spy_directory_syncs(monkeypatch, store_module, leveldb_module)
    store = Store.open(tmp_path / "db", hard_sync=True)
    logs_before = set((tmp_path / "db").glob("*.log"))

    def write(size: int) -> None:
        batch = store.begin()
        batch.add_message(b"v" * size)
        store.commit(batch)

    assert synced == [tmp_path / "db"]  # the open: the MANIFEST and CURRENT LevelDB made

    def no_directory_fsync() -> bool:
        before = len(synced)
        write(10)
        return len(synced) == before

    # Nothing new in the directory: one stat, no fsync (once the last change is older
    # than the kernel's coarse clock could hide).
    wait_until(no_directory_fsync, 5, message="a synced write without a directory fsync")
    synced.clear()
    # A value larger than LevelDB's write buffer fills it: the next write starts a new
    # log, whose name LevelDB leaves to its next MANIFEST write.
    write(leveldb_module.WRITE_BUFFER + 1)
    write(10)
    assert set((tmp_path / "db").glob("*.log")) != logs_before
    assert synced, "the new log's name was not fsync'd"
    store.close()


def test_the_stores_timed_sync_fsyncs_the_archive_first(tmp_path):
    """A message's delete must not reach the disk before its archive record does."""
    store = Store.open(tmp_path / "db", sync_interval_s=1.0, now=0.0)
    tier = ArchiveTier(ArchiveSettings(tmp_path / "archive", 10**6, 10_000, 60_000, 168,
                                       "default", hard_sync=False))
    tier.open(0.0)
    store.register(Archiving(tier))
    store.wake_at(0.0)
    batch = store.begin()
    seq = batch.add_message(b"v")
    store.commit(batch)
    store.wake_at(0.5)
    batch = store.begin()
    tier.append(b"00000000-%016x" % seq, record.encode(b"m", (), (b"body",), 1), 2, 1, 3,
                "00000000")
    batch.delete_message(seq, 1)
    store.commit(batch)  # not a synced batch: the archive waits for its own timer
    assert tier.archive.unsynced_s(0.5) > 0  # what STATS shows
    store.wake_at(1.0)
    tier.wake_at(1.0)
    store.commit(store.begin())  # the timed sync, with the delete in it
    assert tier.archive.unsynced_s(1.0) == 0
    store.wait_for_sync()
    assert store.log_syncs == 1
    tier.close(1.0)
    store.close()


def test_a_batch_written_while_the_sync_runs_fsyncs_the_archive_first(tmp_path):
    """The running sync's fsyncs may catch a later batch's pages: its deletes too."""
    store = Store.open(tmp_path / "db", sync_interval_s=1.0, now=0.0)
    held = HeldSync(store)
    tier = ArchiveTier(ArchiveSettings(tmp_path / "archive", 10**6, 10_000, 60_000, 168,
                                       "default", hard_sync=False))
    tier.open(0.0)
    store.register(Archiving(tier))
    _write_one(store, 0.0)
    seq = store.next_seq - 1
    store.wake_at(1.0)
    store.commit(store.begin())
    assert held.started.wait(10)
    store.wake_at(1.1)
    tier.wake_at(1.1)
    batch = store.begin()
    tier.append(b"00000000-%016x" % seq, record.encode(b"m", (), (b"body",), 1), 2, 1, 3,
                "00000000")
    batch.delete_message(seq, 1)
    store.commit(batch)
    assert tier.archive.unsynced_s(1.1) == 0
    held.release()
    tier.close(1.1)
    store.close()
