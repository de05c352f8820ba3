"""Disks that fill up: the store and the archive on small real filesystems.

Each test mounts a size-limited tmpfs of its own (root only; skipped with the reason
elsewhere) and fills it. Producers are refused with the reason, nothing ACKed is
lost, the node keeps running and takes messages again once space is freed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import plyvel
import pytest
import zmq

from pzq.archive.format.files import read_topic
from pzq.archive.format.records import decode_records
from pzq.archive.tier.topiclog import TopicLog, list_segments
from pzq.cli import monitor as monitor_cli
from pzq.client import Consumer, GroupConsumer, Producer
from pzq.errors import ArchiveError
from pzq.monitoring.metrics import PzqCollector
from pzq.monitoring.scrape import Scraper
from pzq.store import keyspace, record
from tests.support.harness import (
    consume_all,
    produce_until_refused,
    run_pzq,
    wait_until,
    without_permission_overrides,
)
from tests.support.small_disks import mount_tmpfs, unmount_lazily

pytestmark = pytest.mark.timeout(120)

FILLER = 3_600_000  # bytes taken from the filesystem, given back to free space


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    mounted: list[Path] = []

    def mount(megabytes: int) -> Path:
        place = tmp_path / f"fs{len(mounted)}"
        refused = mount_tmpfs(place, megabytes)
        if refused is not None:
            pytest.skip(f"cannot mount a small tmpfs here: {refused}")
        mounted.append(place)
        (place / "filler").write_bytes(b"x" * FILLER)
        return place

    yield mount
    unmount_lazily(mounted)


class Ext4OnLoop:
    """A small ext4 filesystem in a file, mounted with errors=remount-ro: ``fail`` makes
    the kernel meet a filesystem error (it turns the mount read-only, as a failing disk
    would), ``repair`` checks it and mounts it afresh at the same place."""

    def __init__(self, image: Path, place: Path) -> None:
        self.image = image
        self.place = place

    def mount(self) -> None:
        _root_only(["mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.place)])

    def fail(self) -> None:
        device = Path(_root_only(["findmnt", "-n", "-o", "SOURCE", str(self.place)])).name
        Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("1")
        wait_until(lambda: {"ro", "emergency_ro"} & set(_root_only(
            ["findmnt", "-n", "-o", "OPTIONS", str(self.place)]).split(",")),
            10, message="the filesystem read-only")

    def repair(self) -> None:
        """Mount a checked copy of the image where the failed one was: the kernel would
        give a new mount of the same image the failed filesystem again while the node
        still holds files of it (it unmounts lazily, once the node let go)."""
        _root_only(["umount", "-l", str(self.place)])
        copy = self.image.with_name(self.image.name + ".repaired")
        shutil.copyfile(self.image, copy)
        subprocess.run(["e2fsck", "-fy", str(copy)], capture_output=True, check=False)
        self.image = copy
        self.mount()


def _root_only(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"{command[0]} failed here: {result.stderr.strip()}")
    return result.stdout.strip()


@pytest.fixture
def ext4_on_loop(tmp_path: Path) -> Iterator[Ext4OnLoop]:
    image, place = tmp_path / "ext4.img", tmp_path / "ext4"
    place.mkdir()
    with image.open("wb") as handle:
        handle.truncate(32 << 20)
    _root_only(["mkfs.ext4", "-q", str(image)])
    disk = Ext4OnLoop(image, place)
    disk.mount()
    yield disk
    unmount_lazily([disk.place])


def test_an_archive_turned_read_only_keeps_messages_stored_until_it_is_back(
        start_node, context, ext4_on_loop):
    # --hard-sync: what left the store was fsync'd to the archive first, so the
    # filesystem's failure cannot take an archived record with it.
    node = start_node("--archive-dir", str(ext4_on_loop.place / "archive"), "--hard-sync",
                      "--ack-timeout", "500000", "--reaper-frequency", "100000")
    before, _ = produce_until_refused(node, context, 0, 100)
    consume_all(node, context, before)
    node.wait_figures(lambda f: f["messages"] == 0, message="the first hundred archived")

    ext4_on_loop.fail()
    during, refused = produce_until_refused(node, context, 100, 100)
    assert len(during) == 100 and not refused  # the store is elsewhere: producers go on
    with Consumer(node.send_dsn, context=context) as consumer:
        def archive_failing() -> bool:
            message = consumer.receive(0.1)
            if message is not None:
                message.ack()
            return node.stats()["archive"]["failures"] > 0
        wait_until(archive_failing, 30, message="archive writes failing")
    assert node.figures()["messages"] > 0  # acked but not archived: still stored
    wait_until(lambda: node.event("archive_write_failed"), 10,
               message="the failure logged (read from the node's stderr)")

    ext4_on_loop.repair()
    with Consumer(node.send_dsn, context=context) as consumer:
        def all_archived() -> bool:  # acks that failed to archive come back: ack again
            message = consumer.receive(0.1)
            if message is not None:
                message.ack()
            return node.figures()["messages"] == 0
        wait_until(all_archived, 60, message="every message archived and gone from the store")
    wait_until(lambda: node.event("archive_write_recovered"), 10,
               message="the recovery logged (read from the node's stderr)")
    archived = {m.parts[0][:6] for _, m in read_topic(ext4_on_loop.place / "archive", "default")}
    assert archived == before | during


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
    # A wake that writes nothing (this STATS) is no sign the store took a write again:
    # it logged store_write_recovered, and the next refusal store_write_failed anew.
    assert node.figures()["store_write_failing"] == 1
    _, refused_still = produce_until_refused(node, context, 90_000, 1)
    assert refused_still

    (disk / "filler").unlink()  # space again: the node takes messages at once
    more, refused_again = produce_until_refused(node, context, 100_000, 50)
    assert len(more) == 50 and not refused_again
    wait_until(lambda: node.event("store_write_recovered"), 10,
               message="the recovery logged (read from the node's stderr)")
    spell = [event["event"] for event in list(node.events)
             if event["event"] in ("store_write_failed", "store_write_recovered")]
    assert spell == ["store_write_failed", "store_write_recovered"]  # one spell, told once

    node.kill()  # and nothing that was ACKed is lost, across a crash
    node.restart()
    consume_all(node, context, acked | more)


def test_a_full_store_disk_is_said_recovered_once_and_only_once_it_takes_a_write(
        start_node, context, small_filesystem):
    """While the disk stayed full the log said store_write_recovered after each failure
    (a wake with nothing to write passed for a write that succeeded), then
    store_write_failed again at the next message: a full disk read as one that came
    and went. Now one failure and one recovery, the recovery once messages are stored."""
    disk = small_filesystem(6)
    node = start_node(database=disk / "db")
    _, refused = produce_until_refused(node, context, 0, 20_000)
    assert refused, "the filesystem never filled"
    assert node.figures()["store_write_failing"] == 1  # a wake with nothing to write
    _, refused_again = produce_until_refused(node, context, 100_000, 5)
    assert len(refused_again) == 5
    named = [event["event"] for event in list(node.events)
             if event.get("event", "").startswith("store_write_")]
    assert named == ["store_write_failed"], named

    (disk / "filler").unlink()
    more, _ = produce_until_refused(node, context, 200_000, 5)
    assert len(more) == 5
    named = [event["event"] for event in list(node.events)
             if event.get("event", "").startswith("store_write_")]
    assert named == ["store_write_failed", "store_write_recovered"], named


def test_a_group_drained_while_its_store_disk_is_full_gets_each_message_once(
        start_node, context, small_filesystem):
    """A drain's next batch goes out before the write of the ACK before it (and while
    the disk is full, whether or not that write fails): every ACKed message is deleted
    once the disk has room again, none lost, none delivered twice, across a crash."""
    disk = small_filesystem(6)
    node = start_node("--ack-timeout", "600000", database=disk / "db", consume=True)
    consumer = GroupConsumer(node.consume_dsn, "t", "g", window=100, declare=True,
                             context=context)
    bodies = {b"%06d" % i + b"." * 1000 for i in range(600)}
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for body in sorted(bodies):
            producer.send([body], headers=[b"TOPIC:t"])
        assert all(ack.ok for ack in producer.flush(30))
    _fill(disk / "more")
    delivered: list[bytes] = []
    try:
        while len(delivered) < len(bodies):
            messages = consumer.receive_many(100, timeout=10)
            assert messages, f"{len(bodies) - len(delivered)} messages not delivered"
            delivered += [message.parts[0] for message in messages]
            consumer.ack_many(messages)
        assert consumer.protocol == 2
        assert sorted(delivered) == sorted(bodies)  # each once
        assert node.event("store_write_failed") is not None  # the ACKs' writes failed
        assert node.figures()["messages"] > 0
        (disk / "more").unlink()
        (disk / "filler").unlink()
        wait_until(lambda: node.figures()["messages"] == 0, 30,
                   message="the ACKed messages deleted once the disk has room")
    finally:
        consumer.close()
    node.kill()
    node.restart()
    assert node.figures()["messages"] == 0
    with GroupConsumer(node.consume_dsn, "t", "g", window=100, context=context) as again:
        assert again.receive_many(100, timeout=1) == []  # nothing delivered again


def test_a_full_store_disk_with_nobody_producing_is_unhealthy_until_a_write_succeeds(
        start_node, context, small_filesystem, capsys):
    """With nobody producing no message is refused (``store_failures`` stays 0), yet
    every write fails (here a consumer's ACK): ``--check`` read healthy."""
    disk = small_filesystem(6)
    node = start_node("--ack-timeout", "600000", database=disk / "db")
    acked, _ = produce_until_refused(node, context, 0, 20)
    assert len(acked) == 20 and node.stats()["store_write_failing"] == 0
    _fill(disk / "more")
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None
        message.ack()  # its write (the message's delete) fails
        wait_until(lambda: node.stats()["store_write_failing"] == 1, 30,
                   message="the failed write in STATS")
    stats = node.stats()
    assert stats["store_failures"] == 0 and stats["store_write_failing_s"] >= 0
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) \
        == monitor_cli.EXIT_UNHEALTHY
    assert "unhealthy: store writes are failing (for " in capsys.readouterr().err
    (disk / "more").unlink()
    (disk / "filler").unlink()
    wait_until(lambda: node.stats()["store_write_failing"] == 0, 30,
               message="a write succeeding once the disk has room")
    assert node.stats()["store_write_failing_s"] == 0
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) \
        == monitor_cli.EXIT_OK


def test_a_store_directory_moved_away_under_a_running_node_is_refused_not_acked(
        start_node, context, tmp_path, capsys):
    """LevelDB writes on into its open files once its directory is gone from the path:
    the node ACKed each message there, and a restart found a new, empty store."""
    database = tmp_path / "db"
    node = start_node("--ack-timeout", "600000", database=database)
    acked, _ = produce_until_refused(node, context, 0, 20)
    assert len(acked) == 20
    database.rename(tmp_path / "moved")
    during, refused = produce_until_refused(node, context, 1000, 5)
    assert not during and len(refused) == 5
    assert refused[0] == (f"not stored: store write failed: the store's directory {database} "
                          f"was removed or replaced while the node ran (put it back, or stop "
                          f"the node and restore it)").encode()
    assert node.running and node.stats()["store_write_failing"] == 1
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) \
        == monitor_cli.EXIT_UNHEALTHY
    assert "unhealthy: store writes are failing" in capsys.readouterr().err
    (tmp_path / "moved").rename(database)  # back: the node takes messages again
    more, refused_again = produce_until_refused(node, context, 2000, 20)
    assert len(more) == 20 and not refused_again
    node.kill()
    node.restart()
    consume_all(node, context, acked | more)


def _fill(path: Path) -> None:
    """Take every byte left on the file's filesystem."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65_536, 4096, 512, 1):
            try:
                while os.write(fd, b"x" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def test_a_full_archive_disk_keeps_the_message_stored_and_counts_it(start_node, context,
                                                                     small_filesystem, capsys):
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
    # No consumer ACKs now: no archive write, no failure counted between --check's two
    # looks, which read healthy while the archive's disk stayed full.
    assert node.stats()["archive"]["write_failing"] == 1
    assert _archive_failing_metric(node.monitor_dsn) == 1.0
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) \
        == monitor_cli.EXIT_UNHEALTHY
    assert "unhealthy: archive writes are failing (for " in capsys.readouterr().err

    (disk / "filler").unlink()
    consume_all(node, context, acked - delivered)  # delivered again, now archived
    wait_until(lambda: node.figures()["messages"] == 0, 30, message="every message archived")
    assert node.stats()["archive"]["write_failing"] == 0
    assert _archive_failing_metric(node.monitor_dsn) == 0.0
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) \
        == monitor_cli.EXIT_OK


def _archive_failing_metric(monitor_dsn: str) -> float:
    """pzq_archive_write_failing as the exporter gives it for the node."""
    scraper = Scraper([monitor_dsn], timeout=5)
    try:
        families = {family.name: family for family in PzqCollector(scraper).collect()}
    finally:
        scraper.close()
    [sample] = families["pzq_archive_write_failing"].samples
    return float(sample.value)


def test_an_archive_log_on_a_full_disk_cuts_its_half_record_and_goes_on(small_filesystem):
    disk = small_filesystem(4)  # 0.4 MB left once the filler is in
    log = TopicLog(disk / "topic", segment_size=1 << 30, flush_messages=1 << 30,
                   flush_interval_s=3600)
    log.open(now=0.0)
    written = []
    with pytest.raises(ArchiveError, match="No space left on device"):
        for i in range(1000):
            written.append([b"%04d" % i, b"x" * 10_000])
            log.append(written[-1], now=0.0)
    written.pop()  # the record that did not fit
    (disk / "filler").unlink()
    with pytest.raises(ArchiveError, match="not writable: .*No space left"):
        log.append([b"soon", b"y"], now=0.5)  # no new attempt within a second
    log.append([b"later", b"z"], now=1.5)
    log.close(now=1.5)
    data = list_segments(disk / "topic")[0].path.read_bytes()
    assert [frames for _, frames in decode_records(data)] == [*written, [b"later", b"z"]]
    assert log.end_offset == len(data) == log.bytes


def test_an_archive_log_whose_write_failed_still_syncs_the_records_written_before(
        small_filesystem):
    """The store fsyncs the deletes of archived messages only after the archive's
    fsync (before_commit): a log whose write failed skipped its fsync without a word,
    so a full archive disk left every record before the failure unsynced (a node's
    2 487 of them, for over 40 s) while the store's deletes of their messages were
    made durable: a power cut then lost them from both."""
    disk = small_filesystem(4)
    log = TopicLog(disk / "topic", segment_size=1 << 30, flush_messages=1 << 30,
                   flush_interval_s=3600)
    log.open(now=0.0)
    with pytest.raises(ArchiveError, match="No space left on device"):
        for i in range(1000):
            log.append([b"%04d" % i, b"x" * 10_000], now=0.0)
    assert log.end_offset > 0 and log.flushed_offset == 0
    log.sync(now=0.2)  # as before the store's timed sync, with the disk still full
    assert log.flushed_offset == log.end_offset and log.unsynced_since is None
    with pytest.raises(ArchiveError, match="not writable"):
        log.append([b"soon", b"y"], now=0.5)  # the failure stands: the next write waits
    log.close(now=0.5)


def test_a_full_archive_disk_under_acks_of_many_keys_archives_each_message_once(
        start_node, context, small_filesystem):
    """An ACK frame's messages go to the archive in one write: one that fails part-way
    leaves none of them archived (all stay stored), so each is archived once in the
    end, none twice and none lost."""
    disk = small_filesystem(4)
    node = start_node("--archive-dir", str(disk / "archive"), "--ack-timeout", "500000",
                      "--reaper-frequency", "100000", consume=True)
    consumer = GroupConsumer(node.consume_dsn, "t", "g", window=100, declare=True,
                             context=context)
    try:
        bodies = {b"%06d" % i + b"." * 1000 for i in range(1500)}  # 1.5 MB to archive
        with Producer(node.receive_dsn, window=50, context=context) as producer:
            for body in sorted(bodies):
                producer.send([body], headers=[b"TOPIC:t"])
            assert all(ack.ok for ack in producer.flush(30))

        def acked_a_frame() -> int:
            messages = consumer.receive_many(100, timeout=0.2)
            if messages:
                consumer.ack_many(messages)
            return int(node.stats()["archive"]["failures"])
        wait_until(acked_a_frame, 60, message="an archive write failing on a full disk")
        assert consumer.protocol == 2
        (disk / "filler").unlink()
        wait_until(lambda: acked_a_frame() >= 0 and node.figures()["messages"] == 0, 60,
                   message="every message archived")
    finally:
        consumer.close()
    archived = [message.parts[0] for _, message in read_topic(disk / "archive", "t")]
    assert len(archived) == len(bodies) and set(archived) == bodies


def test_an_archive_write_of_many_records_on_a_full_disk_leaves_none_of_them(
        small_filesystem):
    disk = small_filesystem(4)  # 0.4 MB left once the filler is in
    log = TopicLog(disk / "topic", segment_size=150_000, flush_messages=1 << 30,
                   flush_interval_s=3600)
    log.open(now=0.0)
    first = [[b"first %d" % i, b"x" * 10_000] for i in range(10)]
    log.append_many(first, now=0.0)
    many = [[b"many %d" % i, b"y" * 10_000] for i in range(70)]  # 0.7 MB: too much
    with pytest.raises(ArchiveError, match="No space left on device") as raised:
        log.append_many(many, now=0.0)
    # Those in segments it rolled from went in (each fsync'd as it rolled); the rest,
    # half written to the last one, were cut back at once.
    written = raised.value.written
    segments = list_segments(disk / "topic")
    assert 0 < written < len(many) and len(segments) > 2
    assert segments[-1].size == 0 and log.end_offset == segments[-1].start
    (disk / "filler").unlink()
    log.append_many(many[written:], now=1.5)
    log.close(now=1.5)
    data = b"".join(segment.path.read_bytes() for segment in list_segments(disk / "topic"))
    assert [frames for _, frames in decode_records(data)] == [*first, *many]
    assert log.end_offset == len(data) == log.bytes


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

    report = _repair(node.database)
    assert "it did not open" in report and "300 messages" in report
    node.restart()
    consume_all(node, context, acked)


def _store_in_a_table(node, context) -> set[bytes]:
    """3 000 messages ACKed, then written from LevelDB's log into a table file by two
    restarts (a store reopened turns its log into a table)."""
    acked, _ = produce_until_refused(node, context, 0, 3000)
    assert len(acked) == 3000
    for _ in range(2):
        assert node.stop() == 0
        node.restart()
    return acked


def test_a_table_cut_short_is_a_damaged_store_naming_the_repair(start_node, context):
    """LevelDB reads a table past its end as an IO error (Invalid argument): the line
    said no more, where any other damage named the repair."""
    node = start_node()
    _store_in_a_table(node, context)
    assert node.stop() == 0
    table = max(node.database.glob("*.ldb"), key=lambda path: path.stat().st_size)
    os.truncate(table, table.stat().st_size // 2)

    started = run_pzq(["--database", str(node.database), "--receive-dsn", "tcp://127.0.0.1:*",
                       "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert started.returncode == 3
    assert started.stderr.strip() == (
        f"pzq: error: cannot open database {node.database}: a table is shorter than its "
        f"MANIFEST records, cut short (IO error: {table}: Invalid argument); with the node "
        f"stopped, pzq-ctl repair --database {node.database} brings back what is intact")
    # Its index is at its end: repair keeps none of its messages, and says so.
    assert "now 0 messages" in _repair(node.database)
    node.restart()
    assert node.figures()["messages"] == 0


def test_a_store_whose_log_is_gone_is_refused_not_opened_empty(start_node, context, tmp_path):
    """LevelDB opened it without a word: the node started with messages=0 and a new node
    id, every message of the log lost."""
    node = start_node()
    acked, _ = produce_until_refused(node, context, 0, 100)
    assert len(acked) == 100
    assert node.stop() == 0
    (log,) = node.database.glob("*.log")
    log.rename(tmp_path / log.name)

    started = run_pzq(["--database", str(node.database), "--receive-dsn", "tcp://127.0.0.1:*",
                       "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert started.returncode == 3
    assert started.stderr.strip() == (
        f"pzq: error: cannot open database {node.database}: its log (NNNNNN.log) is missing "
        "beside its CURRENT, and LevelDB would open it without the messages written since "
        "its last table; put the log back or restore a backup (a store that never took a "
        "message: remove the directory)")
    (tmp_path / log.name).rename(log)  # back: every message is there
    node.restart()
    consume_all(node, context, acked)


def _damage_a_table(database: Path) -> None:
    table = max(database.glob("*.ldb"), key=lambda path: path.stat().st_size)
    data = bytearray(table.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = b"\xff" * 16
    table.write_bytes(bytes(data))


def _repair(database: Path) -> str:
    repaired = subprocess.run([sys.executable, "-m", "pzq.cli.ctl", "repair", "--database",
                               str(database)], capture_output=True, text=True, timeout=60,
                              check=False)
    assert repaired.returncode == 0, repaired.stderr
    return repaired.stdout


@pytest.mark.parametrize("when", ["at-start", "while-running"])
def test_a_damaged_table_stops_the_node_naming_the_repair(start_node, context, when):
    node = start_node()
    acked = _store_in_a_table(node, context)
    if when == "at-start":
        assert node.stop() == 0
        _damage_a_table(node.database)
        started = run_pzq(["--database", str(node.database), "--receive-dsn",
                           "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
                           "--monitor-dsn", "tcp://127.0.0.1:*"])
        error = started.stderr.strip()
        assert started.returncode == 3 and len(error.splitlines()) == 1, error
    else:  # the node read everything at start; the damage comes after
        _damage_a_table(node.database)
        # A context of its own, destroyed without linger once the node stopped: ACKs
        # still queued in the consumer's socket must not reach the restarted node.
        own_context = zmq.Context()
        with Consumer(node.send_dsn, context=own_context) as consumer:
            def stopped() -> bool:
                while (message := consumer.receive(0.1)) is not None:
                    message.ack()
                return not node.running
            wait_until(stopped, 30, message="the node stopping at the damage")
            own_context.destroy(linger=0)
        assert node.process.returncode == 3
        error = node.stderr_lines[-1]
        assert "Traceback" not in "".join(node.stderr_lines)
    assert "Corruption" in error and "pzq-ctl repair --database" in error

    report = _repair(node.database)
    readable = int(report.split("now ")[1].split(" messages")[0])
    assert "it did not open or read whole (Corruption" in report
    assert 0 < readable < 3000  # the damaged block's messages are gone, the rest is back
    stored = _bodies_stored(node.database)
    assert len(stored) == readable
    node.restart()
    assert node.figures()["messages"] == readable  # counted afresh by the repair
    delivered: set[bytes] = set()
    with Consumer(node.send_dsn, context=context) as consumer:
        def drained() -> bool:
            while (message := consumer.receive(0.1)) is not None:
                delivered.add(message.parts[0][:6])
                message.ack()
            return node.figures()["messages"] == 0
        wait_until(drained, 60, message=f"every readable message delivered ({readable})")
    # Every readable message came again (what the consumer ACKed before the stop and
    # the node did not take is readable, and comes again too).
    assert stored <= delivered and delivered <= acked
    assert not (delivered - stored)


def _bodies_stored(database: Path) -> set[bytes]:
    """The numbers of the messages a (stopped) node's store holds."""
    db = plyvel.DB(str(database))
    try:
        return {record.decode(value).parts[0][:6]
                for value in db.iterator(prefix=keyspace.OWN_PREFIX, include_key=False)}
    finally:
        db.close()


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


def test_repair_reads_every_block_with_its_checksum(tmp_path):
    """Damage that still parses must not outlive a repair: LevelDB's repair keeps such
    a block unless it checks checksums (a quarter of these places failed before)."""
    from pzq.store.leveldb import read_everything
    from pzq.store.repair import repair
    base = tmp_path / "base"
    db = plyvel.DB(str(base), create_if_missing=True)
    for i in range(3000):
        db.put(keyspace.OWN_PREFIX + i.to_bytes(8, "big"), os.urandom(1000))
    db.close()
    for _ in range(2):  # reopened twice: the log becomes a table
        plyvel.DB(str(base)).close()
    table = max(base.glob("*.ldb"), key=lambda path: path.stat().st_size)
    size = table.stat().st_size
    for place in range(5, 45, 2):
        work = tmp_path / f"damaged-at-{place}"
        shutil.copytree(base, work)
        damaged = work / table.name
        data = bytearray(damaged.read_bytes())
        offset = size * place // 50
        data[offset:offset + 16] = b"\xff" * 16
        damaged.write_bytes(bytes(data))
        report = repair(work)
        assert report.was_damaged and 0 < report.messages < 3000, (offset, report)
        reopened = plyvel.DB(str(work), paranoid_checks=True)
        try:
            read_everything(reopened)  # whole again
        finally:
            reopened.close()


START_ON_LOOPBACK = ["--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
                     "--monitor-dsn", "tcp://127.0.0.1:*"]


def test_a_store_without_its_current_is_refused_and_repair_brings_it_back(start_node,
                                                                          context):
    """Without CURRENT LevelDB made a new store in the folder and deleted the tables
    nobody named: the node started empty, every message of the tables gone."""
    node = start_node()
    acked = _store_in_a_table(node, context)
    assert node.stop() == 0
    (node.database / "CURRENT").unlink()
    tables = sorted(node.database.glob("*.ldb"))

    started = run_pzq(["--database", str(node.database), *START_ON_LOOPBACK])
    assert started.returncode == 3, started.stderr
    error = started.stderr.strip()
    assert len(error.splitlines()) == 1 and "CURRENT file is missing" in error
    assert f"pzq-ctl repair --database {node.database}" in error
    assert sorted(node.database.glob("*.ldb")) == tables  # left as they were

    report = _repair(node.database)
    assert "CURRENT file is missing" in report and "3000 messages" in report
    node.restart()
    consume_all(node, context, acked)


@pytest.mark.parametrize(("denied", "mode", "said"), [
    (".", 0o000, "is not readable and writable by this user"),
    (".", 0o500, "is not readable and writable by this user"),
    ("CURRENT", 0o000, "may not read (or write, its LOCK) (permission denied: CURRENT)"),
    ("table", 0o000, "(permission denied: 0"),
    ("LOCK", 0o444, "(permission denied: LOCK)"),
])
def test_a_store_this_user_may_not_use_is_one_line_and_repair_leaves_it_alone(
        start_node, context, denied, mode, said):
    """A folder the node may not read was a traceback (exit 1), a LOCK it may not write
    'in use by another process', and repair moved a table it may not read into lost/
    and reported 0 messages."""
    prefix = without_permission_overrides()
    node = start_node()
    acked = _store_in_a_table(node, context)
    assert node.stop() == 0
    target = (node.database if denied == "." else max(node.database.glob("*.ldb"))
              if denied == "table" else node.database / denied)
    before = target.stat().st_mode
    target.chmod(mode)
    try:
        started = subprocess.run([*prefix, sys.executable, "-m", "pzq", "--database",
                                  str(node.database), *START_ON_LOOPBACK],
                                 capture_output=True, text=True, timeout=30, check=False)
        assert started.returncode == 3, started.stderr
        assert len(started.stderr.strip().splitlines()) == 1 and said in started.stderr
        repaired = subprocess.run([*prefix, sys.executable, "-m", "pzq.cli.ctl", "repair",
                                   "--database", str(node.database)], capture_output=True,
                                  text=True, timeout=60, check=False)
        assert repaired.returncode == 3 and said in repaired.stderr, repaired.stderr
    finally:
        target.chmod(before)
    assert not (node.database / "lost").exists()
    node.restart()
    consume_all(node, context, acked)
