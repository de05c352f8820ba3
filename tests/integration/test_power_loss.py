"""Power cuts under load (see tests/support/power_loss.py): the node's disk keeps only what
was fsync'd, files and directory entries alike, and every restart must be clean.

- ``--hard-sync`` loses nothing ACKed;
- the default (``--sync-interval``) loses nothing ACKed longer than the interval
  plus a margin before the cut (the loop's wake and the fsync itself).
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from pzq.store import keyspace
from pzq.store.store import Store
from tests.support.power_cut import PowerCut, unavailable
from tests.support.power_loss import LARGE, SIZES, node_args, run_round

REASON = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90),
              pytest.mark.skipif(REASON is not None, reason=f"FUSE: {REASON}")]

# Small messages, then large ones that fill LevelDB's write buffer: the cut can fall
# while a new log takes writes and the old one is not yet compacted.
ROUNDS = (SIZES, LARGE)
# Each round's load before the cut, from/to: longer than the window plus the
# margin, so a loss without a bound in time would show as older ACKs lost.
LOAD_S = (1.2, 2.0)
SYNC_INTERVAL_S = 0.2
SYNC_INTERVAL = f"{SYNC_INTERVAL_S}s"
MARGIN_S = 0.8  # the loop's wake after the interval and one sync's time, under load


@pytest.fixture
def power(tmp_path):
    cut = PowerCut(tmp_path)
    try:
        cut.start()
    except RuntimeError as exc:
        if "not permitted" not in str(exc) and "fuse:" not in str(exc):
            raise
        pytest.skip(f"FUSE: cannot mount here: {exc}")  # e.g. a container that forbids it
    yield cut
    cut.close()


@pytest.mark.parametrize("hard_sync, sync_interval", [(True, None), (False, SYNC_INTERVAL),
                                                     (False, "0")],
                         ids=["hard-sync", "sync-interval", "sync-interval-0"])
def test_power_cuts_lose_nothing_acked_outside_the_window(start_node, context, power,
                                                           hard_sync, sync_interval):
    """With --sync-interval 0 the loss has no bound in time (up to LevelDB's write
    buffer): only the restart must be clean (run_round fails if the node does not
    start again)."""
    archive = power.mountpoint / "archive"
    node = start_node(*node_args(archive, hard_sync, sync_interval or "1s"),
                      database=power.mountpoint / "db")
    rng = random.Random()
    for sizes in ROUNDS:
        result = run_round(node, power, archive, rng.uniform(*LOAD_S), rng, context, sizes)
        print(result)
        assert result.acked >= 50, "the cut came before any load"
        if hard_sync:
            assert result.lost == 0
        elif sync_interval != "0":
            assert result.oldest_lost_age_s < SYNC_INTERVAL_S + MARGIN_S
    node.kill()


# Batches into a new store: A and B (B fills LevelDB's write buffer) in one log, C
# in the next, then the timed sync, then the process dies while the old log waits
# for its compaction. What survives must be a prefix of the batches.
WRITE_AND_DIE = """
import os, sys
from pzq.store.leveldb import WRITE_BUFFER
from pzq.store.store import Store
store = Store.open(sys.argv[1], sync_interval_s=1.0, now=0.0)
for now, values in ((0.0, [b"a" * 100] * 10), (0.1, [os.urandom(WRITE_BUFFER + 1)]),
                    (0.2, [b"c"])):
    store.wake_at(now)
    batch = store.begin()
    for value in values:
        batch.add_message(value)
    store.commit(batch)
store.wake_at(1.0)
store.commit(store.begin())  # the timed sync, in its thread
store.wait_for_sync()
os._exit(0)
"""


def test_a_timed_sync_after_a_new_leveldb_log_keeps_a_prefix_of_the_batches(power, tmp_path):
    subprocess.run([sys.executable, "-c", WRITE_AND_DIE, str(power.mountpoint / "db")],
                   cwd=tmp_path, check=True, timeout=60)
    power.cut()
    store = Store.open(power.live / "db")
    stored = sum(1 for _ in store.iterate(keyspace.OWN_PREFIX, values=False))
    counted = store.messages
    store.close()
    assert counted == 12, "the timed sync should have kept every batch"
    assert stored == counted, "batches of the old log lost, later ones kept"
