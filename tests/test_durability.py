"""What reaches the disk, and when: the store's timed log sync (--sync-interval), the
archive's flush timer, and the directories of new files. Time is passed in; the
node tests poll its figures with a deadline."""

from __future__ import annotations

import pytest
from harness import run_pzq

from pzq.client import Producer
from pzq.errors import ExitCode
from pzq.store.log_sync import LogSync
from pzq.store.store import Store

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
    assert (store.syncs, store.log_syncs) == (2, 1)
    assert store.sync_wait_s() is None and store.log_sync.unsynced_s(1.5) == 0
    store.wake_at(3.0)
    store.commit(store.begin())  # all synced: nothing to do
    assert store.syncs == 2
    store.close()
    reopened = Store.open(tmp_path / "db")
    assert reopened.messages == 1
    reopened.close()


def _produce(node, context, count: int) -> None:
    with Producer(node.receive_dsn, window=100, context=context) as producer:
        for i in range(count):
            assert producer.produce([b"m%d" % i]).ok


def test_an_idle_node_syncs_its_log_within_the_interval(start_node, context):
    node = start_node("--sync-interval", "200ms")
    _produce(node, context, 3)
    # No other traffic wakes the node: it wakes for the sync on its own.
    stats = node.wait_stats(lambda s: s["log_syncs"] >= 1 and s["store_unsynced_s"] == 0,
                            message="the log synced by time")
    assert stats["store_sync_age_s"] < 10


def test_sync_interval_0_leaves_the_log_to_the_page_cache(start_node, context):
    node = start_node("--sync-interval", "0")
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
    ('sync-interval = "-2s"\n', "--sync-interval must be 0 or more"),
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
