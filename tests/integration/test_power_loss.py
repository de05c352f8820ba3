"""Power cuts under load (see tests/support/power_loss.py): the node's disk keeps only what
was fsync'd, files and directory entries alike, and every restart must be clean.

- ``--hard-sync`` loses nothing ACKed;
- the default (``--sync-interval``) loses nothing ACKed longer than the interval
  plus a margin before the cut (the loop's wake and the fsync itself).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pzq.store import keyspace
from pzq.store.store import Store
from tests.support.power_cut import (
    PowerCut,
    kill_processes_naming,
    processes_naming,
    unavailable,
)
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


# -- scripts/power_loss.py stopped on the way ------------------------------------------

SCRIPT = Path(__file__).parents[2] / "scripts" / "power_loss.py"


def mounts_under(directory: Path) -> list[str]:
    with open("/proc/mounts") as table:
        return [line.split()[1] for line in table if line.split()[1].startswith(str(directory))]


def stored_under(directory: Path) -> int:
    """Bytes in the node's database on the script's mounted PowerFS (0: none yet)."""
    total = 0
    for mount in mounts_under(directory):
        for path in (Path(mount) / "db").glob("*"):
            with contextlib.suppress(OSError):  # a file LevelDB just removed
                total += path.stat().st_size
    return total


def node_starting(directory: Path) -> bool:
    return bool(mounts_under(directory)) and any(
        " -m pzq " in command for command in processes_naming(directory).values())


def under_load(directory: Path) -> bool:
    return stored_under(directory) >= 1 << 20  # a round's load runs: the node takes it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("moment, reached", [("node starting", node_starting),
                                             ("under load", under_load)],
                         ids=["starting", "loaded"])
def test_the_script_stopped_mid_way_leaves_no_mount_and_no_process(tmp_path, signum, moment,
                                                                   reached):
    """Killed by SIGTERM, the script left its node running and its PowerFS process with
    its mount (a Ctrl-C as its node started, too); it now stops and unmounts what it
    started, and ends with 128 + signum."""
    script = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--rounds", "3", "--mode", "hard-sync", "--load", "5", "5"],
        env={**os.environ, "TMPDIR": str(tmp_path)}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not reached(tmp_path):
            if script.poll() is not None:
                _, stderr = script.communicate()
                if "not permitted" in stderr or "fuse:" in stderr:
                    pytest.skip(f"FUSE: cannot mount here: {stderr.strip()}")
                pytest.fail(f"the script ended before its node ran: {stderr}")
            assert time.monotonic() < deadline, f"not {moment} within 60 s"
            time.sleep(0.05)  # polling the mount table and /proc with a deadline
        script.send_signal(signum)
        _, stderr = script.communicate(timeout=60)
        assert script.returncode == 128 + signum, stderr
        assert "Traceback" not in stderr
        assert mounts_under(tmp_path) == []
        assert processes_naming(tmp_path) == {}
        assert [path.name for path in tmp_path.iterdir()] == []  # its scratch directory too
    finally:  # what a failure left: not left for the next run
        if script.poll() is None:
            script.kill()
            script.wait()
        kill_processes_naming(tmp_path)
        for mount in mounts_under(tmp_path):
            subprocess.run(["fusermount3", "-u", "-z", mount], capture_output=True, check=False)


def test_a_process_naming_a_folder_is_killed_and_reaped_without_its_popen(tmp_path):
    """What the script stops at its end beside its node: a process it started whose
    Popen object was lost (a signal inside Popen) is found by its command line."""
    folder = tmp_path / "mnt" / "db"
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              str(folder)])
    pid = stray.pid
    try:
        deadline = time.monotonic() + 10
        while pid not in processes_naming(folder):
            assert time.monotonic() < deadline, "the stray never showed its command line"
            time.sleep(0.01)  # polling /proc with a deadline
        kill_processes_naming(folder)
        assert processes_naming(folder) == {}
        assert not Path(f"/proc/{pid}").exists()  # reaped, not left a zombie
    finally:
        with contextlib.suppress(ProcessLookupError):
            stray.kill()

