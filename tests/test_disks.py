"""Disks that fill up: the store and the archive on small real filesystems.

Each test mounts a size-limited tmpfs of its own (root only; skipped with the reason
elsewhere) and fills it. Producers are refused with the reason, nothing ACKed is
lost, the node keeps running and takes messages again once space is freed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import consume_all, produce_until_refused, run_pzq, wait_until

from pzq.client import Consumer

pytestmark = pytest.mark.timeout(120)

FILLER = 3_600_000  # bytes taken from the filesystem, given back to free space


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    mounted: list[Path] = []

    def mount(megabytes: int) -> Path:
        place = tmp_path / f"fs{len(mounted)}"
        place.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                                 str(place)], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.strip()}")
        mounted.append(place)
        (place / "filler").write_bytes(b"x" * FILLER)
        return place

    yield mount
    for place in mounted:  # lazily: a node being killed may still hold files there
        subprocess.run(["umount", "-l", str(place)], check=False)


def test_a_full_store_disk_refuses_with_the_reason_and_recovers(start_node, context,
                                                                 small_filesystem):
    disk = small_filesystem(6)
    node = start_node(database=disk / "db")
    acked, refused = produce_until_refused(node, context, 0, 20_000)
    assert refused, "the filesystem never filled"
    # The failed write says why; later ones wait for room to reopen the store first
    # (a torn record in LevelDB's log would lose what is written after it).
    assert refused[0].startswith(b"not stored: store write failed: IO error")
    assert b"No space left on device" in refused[0]
    assert all(b"waiting for" in reason and b"MB free on the store's disk" in reason
               for reason in refused[1:]), refused
    assert not any(b"b'" in reason for reason in refused)
    assert node.figures()["store_failures"] == len(refused)

    (disk / "filler").unlink()  # space again: the node takes messages at once
    more, refused_again = produce_until_refused(node, context, 100_000, 50)
    assert len(more) == 50 and not refused_again

    node.kill()  # and nothing that was ACKed is lost, across a crash
    node.restart()
    consume_all(node, context, acked | more)


def test_a_full_archive_disk_keeps_the_message_stored_and_counts_it(start_node, context,
                                                                     small_filesystem):
    disk = small_filesystem(4)
    node = start_node("--archive-dir", str(disk / "archive"), "--flush-messages", "1",
                      "--ack-timeout", "500000", "--reaper-frequency", "100000")
    acked, _ = produce_until_refused(node, context, 0, 1500)  # about 1.5 MB to archive
    assert len(acked) == 1500
    delivered: set[bytes] = set()
    with Consumer(node.send_dsn, context=context) as consumer:
        def archive_failed() -> bool:
            message = consumer.receive(0.1)
            if message is not None:
                delivered.add(message.parts[0][:6])
                message.ack()
            return node.stats()["archive"]["failures"] > 0
        wait_until(archive_failed, 60, message="an archive write failing on a full disk")
    assert node.figures()["messages"] > 0  # what was not archived is still stored

    (disk / "filler").unlink()
    consume_all(node, context, acked - delivered)  # delivered again, now archived
    wait_until(lambda: node.figures()["messages"] == 0, 30, message="every message archived")


def test_a_damaged_store_is_a_clear_start_error_and_repair_brings_it_back(start_node, context,
                                                                          tmp_path):
    node = start_node()
    acked, _ = produce_until_refused(node, context, 0, 300)
    assert len(acked) == 300
    assert node.stop() == 0
    manifest = next(node.database.glob("MANIFEST-*"))
    manifest.write_bytes(b"\x00garbage" * 8)  # the store's table of contents, damaged

    started = run_pzq(["--database", str(node.database), "--receive-dsn", "tcp://127.0.0.1:*",
                       "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert started.returncode == 3
    error = started.stderr.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in error
    assert "Corruption" in error and "pzq-ctl repair --database" in error

    repaired = subprocess.run([sys.executable, "-m", "pzq.cli.ctl", "repair", "--database",
                               str(node.database)], capture_output=True, text=True, timeout=60,
                              check=False)
    assert repaired.returncode == 0, repaired.stderr
    assert "it did not open" in repaired.stdout and "300 messages" in repaired.stdout
    node.restart()
    consume_all(node, context, acked)


def test_repair_refuses_a_store_a_node_has_open(node, tmp_path):
    repaired = subprocess.run([sys.executable, "-m", "pzq.cli.ctl", "repair", "--database",
                               str(node.database)], capture_output=True, text=True, timeout=60,
                              check=False)
    assert repaired.returncode == 3
    assert "in use by a running node" in repaired.stderr
    assert len(repaired.stderr.strip().splitlines()) == 1
    missing = subprocess.run([sys.executable, "-m", "pzq.cli.ctl", "repair", "--database",
                              str(tmp_path / "nothing")], capture_output=True, text=True,
                             timeout=60, check=False)
    assert missing.returncode == 3 and "holds no pzq store" in missing.stderr
