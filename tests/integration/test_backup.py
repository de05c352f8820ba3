"""Backups of a running node (pzq-ctl backup, the monitor's BACKUP) and their restore:
one node for the module, a backup taken while 100 000 messages are produced and
others consumed, a node started on the copy, and the copy refused at start once
altered, cut short or incomplete."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import plyvel
import pytest
import zmq

from pzq.archive.damage import DamagedRecord, raise_damage
from pzq.archive.format.files import read_topic, topic_items
from pzq.archive.reader import ArchiveReader
from pzq.backup.files import digest_of
from pzq.backup.manifest import RESTORE_SEQ_GAP, UNCHECKED
from pzq.client import Consumer, Producer
from pzq.protocol.monitor_text import parse_monitor_text
from pzq.store import keyspace, record
from pzq.store.store import Store
from pzq.store.store_format import STORE_FORMAT
from tests.support.harness import NodeProcess, run_pzq, wait_until
from tests.support.small_disks import mount_tmpfs, unmount_lazily

pytestmark = pytest.mark.timeout(180)
CTL = str(Path(sys.executable).parent / "pzq-ctl")
BEFORE = 30_000  # stored before the backup
CONSUMED_BEFORE = 5_000  # of those, acked by a consumer before it
DURING = 100_000  # produced while it runs


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("backups")


@pytest.fixture(scope="module")
def node(base):
    node = NodeProcess(base / "db", "--archive-dir", str(base / "archive"),
                       "--flush-interval", "50", "--ack-timeout", "60s").start()
    yield node
    if node.running:
        node.kill()


def body(topic: bytes, number: int) -> bytes:
    return b"%s %07d " % (topic, number) + b"x" * 80


def number_of(first_part: bytes) -> tuple[bytes, int]:
    topic, number, _ = first_part.split(b" ", 2)
    return topic, int(number)


def produce(dsn: str, topic: str, count: int, acked: list[float] | None = None) -> None:
    """``count`` messages in batches; each ACK's arrival time into ``acked``."""
    context = zmq.Context()
    try:
        # every ACK is waited for (flush's 120 s): a node slowed by a backup on a busy
        # machine is not lost, and no message of its is to be given up at 20 s
        with Producer(dsn, window=10_000, context=context, ack_timeout=None) as producer:
            for number in range(count):
                producer.send([body(topic.encode(), number)], topic=topic)
                if acked is not None and number % 1000 == 0:
                    acked.extend(time.monotonic() for ack in producer.acks() if ack.ok)
            for ack in producer.flush(120):
                assert ack.ok and not ack.status_message, ack
                if acked is not None:
                    acked.append(time.monotonic())
    finally:
        context.term()


class Consuming(threading.Thread):
    """Acks ``first`` deliveries from --send-dsn, waits for ``go``, then acks on until
    told to stop: what it acked, and when. One consumer throughout: deliveries sent to
    a consumer that left count in the node's window until their ack timeout."""

    def __init__(self, dsn: str, first: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.first = first
        self.acked: list[tuple[float, bytes]] = []
        self.go = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        context = zmq.Context()
        try:
            with Consumer(self.dsn, context=context) as consumer:
                while not self.stop.is_set():
                    if len(self.acked) == self.first:
                        self.go.wait()
                    message = consumer.receive(0.1)
                    if message is not None:
                        message.ack()
                        self.acked.append((time.monotonic(), message.parts[0]))
        finally:
            context.term()

    def acked_before(self, moment: float) -> set[tuple[bytes, int]]:
        return {number_of(first) for when, first in self.acked if when < moment}


def ctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CTL, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def stored_numbers(database: Path) -> tuple[set[tuple[bytes, int]], int]:
    """What a store holds, and the next sequence number it gives out."""
    store = Store.open(database)
    try:
        return {number_of(record.decode(value).parts[0])
                for _, value in store.iterate(keyspace.OWN_PREFIX)}, store.next_seq
    finally:
        store.close()


@pytest.fixture(scope="module")
def backup(node, base) -> dict:
    """The backup taken under load, and what was ACKed and consumed around it."""
    produce(node.receive_dsn, "orders", BEFORE)
    consuming = Consuming(node.send_dsn, CONSUMED_BEFORE)
    consuming.start()
    node.wait_stats(lambda s: s["messages"] == BEFORE - CONSUMED_BEFORE, 30, "the acks")
    node.wait_archive_durable()
    during: list[float] = []
    producing = threading.Thread(target=produce, args=(node.receive_dsn, "during", DURING,
                                                       during), daemon=True)
    producing.start()
    wait_until(lambda: len(during) >= 10_000, 60, message="the producer under way")
    consuming.go.set()
    began = time.monotonic()
    result = ctl("backup", str(base / "copy"), "--dsn", node.monitor_dsn)
    ended = time.monotonic()
    consuming.stop.set()
    producing.join(120)
    consuming.join(10)
    assert result.returncode == 0, result.stderr
    shutil.copytree(base / "copy", base / "untouched")  # a restore changes the copy
    return {"dir": base / "copy", "untouched": base / "untouched", "began": began,
            "ended": ended, "during": during, "consumed": consuming, "result": result,
            "manifest": json.loads((base / "copy" / "store" /
                                    "backup-manifest.json").read_text())}


def test_a_backup_under_load_keeps_every_message_acked_before_it(node, backup):
    result = backup["result"]
    assert f"backup {backup['manifest']['backup']} done in " in result.stdout
    # a restore on a copy: the hint's command, run as printed, leaves the backup as it was
    assert result.stdout.strip().endswith(
        "restore it on a copy, NEW a directory that does not exist yet (a node started on "
        f"the backup itself changes it): cp -a {backup['dir']} NEW && pzq --database "
        "NEW/store --archive-dir NEW/archive"), result.stdout
    assert " begun" in result.stderr
    # Producers and consumers went on while it ran.
    assert any(backup["began"] < when < backup["ended"] for when in backup["during"])
    assert any(backup["began"] < when < backup["ended"]
               for when, _ in backup["consumed"].acked)
    copy = backup["dir"]
    archived = {number_of(message.parts[0]) for _, message in
                read_topic(copy / "archive", "orders", on_damage=raise_damage)}
    restored = NodeProcess(copy / "store", "--archive-dir", str(copy / "archive"),
                           "--archive-dsn", "tcp://127.0.0.1:*").start()
    try:
        event = restored.event("backup_restored")
        assert event["archive"] == "checked"
        assert restored.stats()["node_id"] == node.stats()["node_id"]
        # What the copy lacks, from its next seq to the skip's end, kept for its peers
        # and carried into a backup of the restored node
        # (the skip, and a seq per µs since the snapshot: pzq.backup.manifest.restore_skip)
        lost = event["lost_seqs"]
        assert len(lost) == 1 and lost[0][1] == event["next_seq"]
        assert lost[0][1] - lost[0][0] >= RESTORE_SEQ_GAP
        again = copy.parent / "backup-of-the-restored"
        assert ctl("backup", str(again), "--dsn", restored.monitor_dsn).returncode == 0
        assert json.loads((again / "store" / "backup-manifest.json").read_text())[
            "lost_seqs"] == lost
        with ArchiveReader(restored.event("node_ready")["archive"], "orders") as reader:
            assert len(list(reader.messages())) == len(archived)  # read whole over FETCH
    finally:
        assert restored.stop() == 0
    assert json.loads((copy / "store" / "backup-manifest.restored.json").read_text())[
        "lost_seqs"] == lost
    in_store, next_seq = stored_numbers(copy / "store")
    # Its keys go on past those the original gave out after the backup.
    assert next_seq >= RESTORE_SEQ_GAP + backup["manifest"]["store"]["keys"]
    acked_before = {(b"orders", number) for number in range(BEFORE)}
    # Nothing ACKed before the backup is lost: in the store, or archived as acked ...
    assert acked_before <= in_store | archived
    # ... and what no consumer had acked by its end is in the store.
    assert acked_before - backup["consumed"].acked_before(backup["ended"]) \
        - {(b"orders", number) for number in range(CONSUMED_BEFORE)} <= in_store
    assert {(b"orders", number) for number in range(CONSUMED_BEFORE)} <= archived
    items = list(topic_items(copy / "archive", "orders"))
    assert not [item for item in items if isinstance(item, DamagedRecord)]
    durable_end = backup["manifest"]["archive"]["topics"]["orders"]["durable_end"]
    assert items[-1].offset + items[-1].size == durable_end  # whole, to its durable end



# -- a copy refused at start ---------------------------------------------------------------

def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def start_on(copy: Path) -> subprocess.CompletedProcess[str]:
    return run_pzq(["--database", str(copy / "store"), "--archive-dir", str(copy / "archive"),
                    "--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
                    "--monitor-dsn", "tcp://127.0.0.1:*"], timeout=30)


def test_a_copy_altered_or_missing_a_file_is_refused_at_start_naming_it(backup, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(backup["untouched"], copy)
    for area in ("store", "archive"):
        name = sorted(backup["manifest"][area]["files"])[-1]  # the store's log; a segment
        path = copy / area / name
        kept = path.read_bytes()
        middle = len(kept) // 2
        path.write_bytes(kept[:middle] + bytes([kept[middle] ^ 0x01]) + kept[middle + 1:])
        result = start_on(copy)
        assert result.returncode == 3
        assert one_line(result.stderr).startswith(
            f"pzq: error: {path} differs from the backup's manifest (")
        path.unlink()
        result = start_on(copy)
        assert result.returncode == 3
        assert one_line(result.stderr) == (
            f"pzq: error: {path} is missing from the backup (its manifest "
            f"{copy}/store/backup-manifest.json lists it): restore a whole copy")
        path.write_bytes(kept)  # the next area's file is the one at fault
    manifest = copy / "store" / "backup-manifest.json"
    manifest.write_text("{not json")
    result = start_on(copy)
    assert result.returncode == 3
    assert one_line(result.stderr).startswith(
        f"pzq: error: {manifest} is not a backup manifest this pzq can read (not JSON: ")


@pytest.mark.parametrize("damage, why", [
    (lambda m: m["store"]["files"].update({"000099.ldb": {"bytes": 1}}),
     "its store file 000099.ldb has no bytes and sha256"),
    (lambda m: m["store"].pop("files"), "its store has no list of files"),
    (lambda m: m["archive"].pop("files"), "its archive has no list of files"),
    (lambda m: m.pop("complete"), "it has no 'complete'"),
])
def test_a_manifest_short_of_a_field_is_refused_in_one_line(backup, tmp_path, damage, why):
    """A file's entry without its sha256, or an area without its files: a traceback
    (KeyError) from the check that read it, exit 1."""
    copy = tmp_path / "copy"
    shutil.copytree(backup["untouched"], copy)
    manifest = copy / "store" / "backup-manifest.json"
    content = json.loads(manifest.read_text())
    damage(content)
    manifest.write_text(json.dumps(content))
    result = start_on(copy)
    assert (result.returncode, one_line(result.stderr)) == (3, (
        f"pzq: error: {manifest} is not a backup manifest this pzq can read ({why}): it was "
        "changed or damaged since the backup; restore a whole copy"))


def old_store_folder(place: Path) -> Path:
    """A folder holding another store, as an old one left where the copy is restored:
    reopened twice so that its log's number is past those of the copy's files."""
    (place / "archive" / "orders").mkdir(parents=True)
    (place / "archive" / "orders" / "00000000000000000000.idx").write_bytes(b"old index")
    for round_ in range(3):
        db = plyvel.DB(str(place / "store"), create_if_missing=True)
        db.put(keyspace.META_PREFIX + b"old", b"%d" % round_)
        db.close()
    return place


def test_a_copy_restored_onto_a_folder_holding_another_store_is_refused(backup, tmp_path):
    """``files the manifest does not list are left alone`` let an old store's log be
    replayed into the copy (its counts mixed into the restored node's); every file of
    the folder must be the backup's."""
    copy = old_store_folder(tmp_path / "restored")
    shutil.copytree(backup["untouched"], copy, dirs_exist_ok=True)
    listed = {*backup["manifest"]["store"]["files"], "backup-manifest.json", "LOCK", "LOG",
              "LOG.old"}
    strays = sorted(path.name for path in (copy / "store").iterdir() if path.name not in listed)
    assert any(name.endswith(".log") for name in strays), strays  # a log LevelDB replays
    stray = strays[0]
    result = start_on(copy)
    assert result.returncode == 3
    assert one_line(result.stderr) == (
        f"pzq: error: {copy}/store/{stray} is not in the backup (its manifest "
        f"{copy}/store/backup-manifest.json does not list it): restore the copy into a new "
        "or empty directory, as a file of another store there would be read with it")
    for name in strays:  # the store's strays gone: the archive's next
        (copy / "store" / name).unlink()
    result = start_on(copy)
    assert result.returncode == 3
    assert one_line(result.stderr).startswith(
        f"pzq: error: {copy}/archive/orders/00000000000000000000.idx is not in the backup")


def test_a_backup_of_a_newer_store_format_is_refused_untouched(backup, tmp_path):
    """A release that reads format 6 given a newer release's backup: LevelDB's open had
    rewritten the copy (its log into a table) before the store's format was refused,
    and the release that reads it then refused the copy as changed since the backup."""
    copy = tmp_path / "newer"
    shutil.copytree(backup["untouched"], copy)
    db = plyvel.DB(str(copy / "store"))  # the store as a release of format 7 leaves it
    db.put(keyspace.META_FORMAT, b"7", sync=True)
    db.close()
    manifest_path = copy / "store" / "backup-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["store_format"], manifest["release"] = 7, "9.9.9"
    manifest["store"]["files"] = {
        path.name: digest_of(path).as_json() for path in sorted((copy / "store").iterdir())
        if path.name not in UNCHECKED}
    manifest_path.write_text(json.dumps(manifest))
    before = {path.name: digest_of(path) for path in (copy / "store").iterdir()}
    result = start_on(copy)
    assert result.returncode == 3
    assert one_line(result.stderr) == (
        f"pzq: error: {manifest_path} is a backup of a store of format 7, newer than this "
        f"pzq reads (format {STORE_FORMAT}): restore it with a release that reads format 7 "
        "(pzq 9.9.9); the copy is untouched")
    assert {path.name: digest_of(path) for path in (copy / "store").iterdir()} == before
    manifest["pzq_backup"] = 2
    manifest_path.write_text(json.dumps(manifest))
    result = start_on(copy)
    assert (result.returncode, one_line(result.stderr)) == (3, (
        f"pzq: error: {manifest_path} is of a newer backup format (2) than this pzq reads "
        "(1): restore it with the release that took it (pzq 9.9.9)"))


def test_a_backup_s_own_folder_given_as_the_database_says_where_its_store_is(backup,
                                                                              tmp_path):
    """It said the folder holds other files and no pzq store (archive, store)."""
    copy = tmp_path / "copy"
    shutil.copytree(backup["untouched"], copy)
    result = run_pzq(["--database", str(copy), "--receive-dsn", "tcp://127.0.0.1:*",
                      "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"],
                     timeout=30)
    assert (result.returncode, one_line(result.stderr)) == (3, (
        f"pzq: error: --database {copy} is a backup (pzq-ctl backup), not a store: restore "
        f"it with --database {copy}/store and --archive-dir {copy}/archive, on a copy of it"))
    assert sorted(path.name for path in copy.iterdir()) == ["archive", "store"]


@pytest.mark.parametrize("command, reason", [
    ("BACKUP relative/dir", "ERROR: relative/dir is not an absolute path"),
    ("BACKUP /a /b", "ERROR: usage: BACKUP DIR"),
])
def test_backup_refuses_a_directory_it_cannot_take(node, command, reason):
    assert node.ask(command).startswith(reason)


def test_backup_refuses_a_directory_inside_the_store_or_the_archive_it_copies(node, base):
    """It wrote the copy there: on their disk, gone with them, and a subfolder of the
    archive read as a topic's."""
    for option, own in (("--database", base / "db"), ("--archive-dir", base / "archive")):
        for inside in (own / "copy", own / "deeper" / "copy", own):
            assert node.ask(f"BACKUP {inside}") == (
                f"ERROR: {inside} is inside the node's {option} {own.resolve()}: give a "
                "directory outside the store and the archive it copies")
        assert not (own / "copy").exists() and not (own / "deeper").exists()


def test_backup_refuses_a_directory_with_content_a_file_and_a_second_at_once(node, backup,
                                                                              tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes").write_text("mine")
    assert node.ask(f"BACKUP {tmp_path}/full") == (
        f"ERROR: {tmp_path}/full exists and is not an empty directory: give a new or empty one")
    assert node.ask(f"BACKUP {tmp_path}/full/notes").startswith(
        f"ERROR: {tmp_path}/full/notes exists and is not an empty directory")
    refused = ctl("backup", str(tmp_path / "full"), "--dsn", node.monitor_dsn)
    assert (refused.returncode, refused.stderr.strip().splitlines()[-1]) == (
        1, f"pzq-ctl: ERROR: {tmp_path}/full exists and is not an empty directory: give a "
           "new or empty one")
    first = node.ask(f"BACKUP {tmp_path}/first")
    backup_id = first.split("\n")[0].removeprefix("backup: ")
    assert node.ask(f"BACKUP {tmp_path}/second") == (
        f"ERROR: backup {backup_id} into {tmp_path}/first is running: one at a time")
    assert not (tmp_path / "second").exists()
    done = wait_until(lambda: (lambda s: s if s["backup"]["state"] != "running" else None)(
        node.stats()), 120, message="the first backup's end")
    assert done["backup"]["state"] == "done"
    (tmp_path / "a-file").write_text("")
    failed = ctl("backup", str(tmp_path / "a-file" / "below"), "--dsn", node.monitor_dsn)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1].endswith(
        f"failed: {tmp_path}/a-file/below/store: Not a directory (what it wrote is removed)")
    spaced = ctl("backup", "has space", "--dsn", node.monitor_dsn)
    assert spaced.returncode == 2
    assert spaced.stderr.strip().endswith("has space: give a directory whose path holds no "
                                          "spaces (the monitor's command is split at them)")


def test_a_full_disk_fails_the_backup_with_the_reason_and_the_node_goes_on(node, backup,
                                                                          tmp_path, context):
    disk = tmp_path / "small"
    why = mount_tmpfs(disk, 2)
    if why is not None:
        pytest.skip(f"no small disk to fill: {why}")
    try:
        (disk / "mine").mkdir()  # the user's empty directory stays; those made go
        for target in (disk / "deeper" / "copy", disk / "mine"):
            result = ctl("backup", str(target), "--dsn", node.monitor_dsn)
            assert result.returncode == 1
            line = result.stderr.strip().splitlines()[-1]
            assert line.startswith("pzq-ctl: error: backup ")
            assert "No space left on device" in line
            assert line.endswith("(what it wrote is removed)")
        assert sorted(path.name for path in disk.iterdir()) == ["mine"]
        assert list((disk / "mine").iterdir()) == []
        with Producer(node.receive_dsn, context=context) as producer:
            assert producer.produce([b"after the full disk"]).ok
    finally:
        unmount_lazily([disk])


def test_an_archive_file_a_full_disk_cuts_short_is_named_by_the_folder_given(tmp_path,
                                                                             context):
    """The store's copy fits, the archive's does not: the file it could not write is
    named under the folder given, as the store's are (not ``archive/...`` alone)."""
    disk = tmp_path / "small"
    why = mount_tmpfs(disk, 2)
    if why is not None:
        pytest.skip(f"no small disk to fill: {why}")
    node = NodeProcess(tmp_path / "db", "--archive-dir", str(tmp_path / "archive"),
                       "--flush-interval", "50").start()
    try:
        with Producer(node.receive_dsn, window=1000, context=context) as producer:
            for number in range(3000):  # some 3.5 MB archived, the store left empty
                producer.send([b"%07d " % number + b"x" * 1100])
            assert all(ack.ok for ack in producer.flush(60))
        with Consumer(node.send_dsn, context=context) as consumer:
            for _ in range(3000):
                message = consumer.receive(20)
                assert message is not None
                message.ack()
        wait_until(lambda: node.figures()["messages"] == 0, 30)
        result = ctl("backup", str(disk / "copy"), "--dsn", node.monitor_dsn)
        assert result.returncode == 1
        line = result.stderr.strip().splitlines()[-1]
        assert "No space left on device" in line, line
        assert f"failed: {disk / 'copy' / 'archive'}/" in line, line
    finally:
        node.kill()
        unmount_lazily([disk])


def copying(node) -> bool:
    status = parse_monitor_text(node.ask("BACKUP").encode())
    return status["state"] == "running" and int(status["store_keys"]) > 0


def test_a_copy_whose_node_was_killed_during_the_backup_is_refused(node, backup, tmp_path):
    partial = tmp_path / "partial"
    assert "state: running" in node.ask(f"BACKUP {partial}")
    wait_until(lambda: copying(node), 30, interval=0.001, message="the store's copy")
    node.kill()
    manifest = json.loads((partial / "store" / "backup-manifest.json").read_text())
    assert manifest["complete"] is False
    result = start_on(partial)
    assert result.returncode == 3
    assert one_line(result.stderr) == (
        f"pzq: error: {partial}/store/backup-manifest.json says the backup did not finish: "
        "the copy is partial (the node was stopped or its disk was full during it); "
        "restore another backup")
    node.restart()
    assert node.ask("BACKUP") == "state: none\n"  # none since it started


def test_pzq_ctl_says_a_node_killed_during_its_backup_left_a_partial_copy(node, backup,
                                                                          tmp_path):
    """It said the backup went on in the node, which was dead."""
    partial = tmp_path / "partial"
    waiting = subprocess.Popen([CTL, "--dsn", node.monitor_dsn, "--timeout", "2", "backup",
                                str(partial)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        wait_until(lambda: copying(node), 30, interval=0.001, message="the store's copy")
        backup_id = parse_monitor_text(node.ask("BACKUP").encode())["backup"]
        node.kill()
        _, stderr = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 1
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"pzq-ctl: error: no answer from {node.monitor_dsn} within 2 s")
    assert last.endswith(
        f" during backup {backup_id}: if the node was killed, {partial} holds a partial "
        "copy, refused at start (its manifest says so): remove it and back up again once "
        "the node runs; if it was stopped, it removed the copy (backup_failed in its log); "
        "if it is slow, STATS shows the backup"), last
    assert start_on(partial).returncode == 3
    node.restart()


def test_pzq_ctl_backup_of_a_node_that_never_answered_says_none_is_known_to_have_begun(
        start_node, tmp_path):
    """It said 'a backup begun goes on in the node' of a node that was not there."""
    gone = start_node()
    gone.kill()
    result = ctl("--dsn", gone.monitor_dsn, "--timeout", "1", "backup", str(tmp_path / "b"))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"pzq-ctl: error: no answer from {gone.monitor_dsn} within 1 s: nothing answers there "
        "(is the node running?); no backup is known to have begun: if the node took BACKUP "
        "before it fell silent, the backup goes on there (STATS shows it)")
    assert not (tmp_path / "b").exists()


def waiting_ctl(node, target: Path, *options: str) -> subprocess.Popen[str]:
    """pzq-ctl backup into ``target``, once the node is copying the store for it."""
    waiting = subprocess.Popen([CTL, "--dsn", node.monitor_dsn, *options, "backup",
                                str(target)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True)
    try:
        wait_until(lambda: copying(node), 30, interval=0.001, message="the store's copy")
    except BaseException:
        waiting.kill()
        waiting.communicate()
        raise
    return waiting


def ended(waiting: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()


def test_pzq_ctl_stopped_by_sigterm_says_the_backup_goes_on_in_the_node(node, backup,
                                                                       tmp_path):
    """A timer's or timeout's stop ends it as Ctrl-C does: it died without a word."""
    target = tmp_path / "goes-on"
    waiting = waiting_ctl(node, target)
    waiting.send_signal(signal.SIGTERM)
    stdout, stderr = ended(waiting)
    assert waiting.returncode == 130, (stdout, stderr)
    assert stderr.strip().splitlines()[-1] == (
        "pzq-ctl: stopped waiting; the backup goes on in the node (STATS shows it)")
    assert "Traceback" not in stderr
    wait_until(lambda: "state: done" in node.ask("BACKUP"), 60, message="the backup's end")
    assert json.loads((target / "store" / "backup-manifest.json").read_text())["complete"]


def test_pzq_ctl_says_a_node_stopped_during_its_backup_removed_the_copy(node, backup,
                                                                        tmp_path):
    """It said the copy was partial and to be removed: the node had removed it."""
    target = tmp_path / "removed"
    waiting = waiting_ctl(node, target, "--timeout", "2")
    assert node.stop() == 0
    _, stderr = ended(waiting)
    assert waiting.returncode == 1
    assert not target.exists()  # made for the copy: it left an empty directory
    last = stderr.strip().splitlines()[-1]
    # (or, had a poll come between the backup's end and the node's, the failure itself)
    assert "if it was stopped, it removed the copy (backup_failed in its log)" in last \
        or last.endswith("the node stopped during the backup (what it wrote is removed)"), last
    node.restart()


def test_a_node_stopped_during_a_backup_removes_the_partial_copy(node, backup, tmp_path):
    stopped = tmp_path / "stopped"
    assert "state: running" in node.ask(f"BACKUP {stopped}")
    wait_until(lambda: copying(node), 30, interval=0.001, message="the store's copy")
    assert node.stop() == 0
    assert not stopped.exists()  # made for the copy: it left an empty directory
    # this backup's (an earlier test's backup may have failed on the module's node too)
    (failed,) = [event for event in node.events if event.get("event") == "backup_failed"
                 and event.get("directory") == str(stopped)]
    assert failed["error"] == ("the node stopped during the backup (what it wrote is "
                               "removed)")
    node.restart()  # the module's node, for what may come after


@pytest.mark.slow
def test_the_pause_script_measures_a_backup_beside_its_baseline(tmp_path):
    """scripts/backup_pause.py, small: its figures for docs/operations.rst."""
    script = Path(__file__).parents[2] / "scripts" / "backup_pause.py"
    ran = subprocess.run([sys.executable, str(script), "--stored", "3000",
                          "--probe-seconds", "0.5", "--json", str(tmp_path / "pause.json")],
                         capture_output=True, text=True, timeout=150, check=False)
    assert ran.returncode == 0, ran.stderr
    figures = json.loads((tmp_path / "pause.json").read_text())
    assert figures["backup"]["state"] == "done"
    assert figures["backup"]["store_keys"] >= 3000
    assert figures["backup"]["steps"] > 0 and figures["backup"]["longest_step_ms"] > 0
    for when in ("baseline", "during"):
        assert figures[when]["ping"]["rounds"] > 0 and figures[when]["produce"]["rounds"] > 0
    assert "longest backup step:" in ran.stdout
