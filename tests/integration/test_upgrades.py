"""Upgrades: the store's format version and a store kept from an earlier release (its
fixture in tests/fixtures), and a node of this release in a cluster with one of the
previous release (checked out from git history)."""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import plyvel
import pytest

from pzq.client import Consumer, GroupConsumer, Producer
from pzq.delivery.groups import GroupArea
from pzq.protocol.routing import CLUSTER_PROTOCOL
from pzq.store import keyspace, record
from pzq.store.replicas import split_value
from pzq.store.scheduled import ScheduledArea
from pzq.store.store import Store
from pzq.store.store_format import STORE_FORMAT
from pzq.store.topics import Topics
from tests.support.harness import run_pzq
from tests.support.stored import stored_log

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "store_format_1"
# The previous release: main as this one began, before the cluster frames had a version.
PREVIOUS_RELEASE = "6e6f905b605ced6fc9c0e69f4cea2a280d19383a"
LOOPBACK = ("--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
            "--monitor-dsn", "tcp://127.0.0.1:*")


def stored_format(path: Path) -> bytes | None:
    db = plyvel.DB(str(path))
    try:
        return db.get(keyspace.META_FORMAT)
    finally:
        db.close()


def set_format(path: Path, value: bytes) -> None:
    Store.open(path).close()
    db = plyvel.DB(str(path))
    try:
        db.put(keyspace.META_FORMAT, value, sync=True)
    finally:
        db.close()


# -- the store's format version -----------------------------------------------------------

def test_a_new_store_is_written_with_this_release_s_format(tmp_path):
    Store.open(tmp_path / "db").close()
    assert stored_format(tmp_path / "db") == str(STORE_FORMAT).encode()


@pytest.mark.parametrize("value, line", [
    (b"7", "has format 7, newer than this pzq reads (format 6): run a release that reads "
           "format 7, or start this one on a backup taken before the upgrade"),
    (b"two", "is not one this pzq can read: its format version 'two' is not a whole "
             "number from 1"),
])
def test_a_store_of_a_format_this_release_cannot_read_is_refused_untouched(tmp_path, value,
                                                                           line):
    database = tmp_path / "db"
    set_format(database, value)
    result = run_pzq(["--database", str(database), *LOOPBACK], timeout=20)
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [f"pzq: error: the store {database} {line}"]
    assert stored_format(database) == value


def test_a_store_of_format_1_is_brought_up_to_this_release_s_format(tmp_path):
    """Formats 2, 3 and 6 only add areas to format 1 (and 4 and 5 change the marks and the
    topics' logs, of which this store has none): a store that says format 1 is written as
    6 at start, so a release of format 1 refuses it from then on (it would not see
    scheduled messages)."""
    database = tmp_path / "db"
    Store.open(database).close()
    set_format(database, b"1")
    Store.open(database).close()
    assert stored_format(database) == str(STORE_FORMAT).encode() == b"6"


def test_a_store_of_format_5_is_brought_up_to_6_by_its_version_alone(tmp_path):
    """Format 6 adds the waits of given-back deliveries (``W``), of which a store of
    format 5 has none: its keys stay as they were, the version is written as 6."""
    database = tmp_path / "db"
    Store.open(database).close()
    db = plyvel.DB(str(database))
    db.put(keyspace.META_FORMAT, b"5", sync=True)
    before = {key: value for key, value in db if key != keyspace.META_FORMAT}
    db.close()
    Store.open(database).close()
    db = plyvel.DB(str(database))
    try:
        assert db.get(keyspace.META_FORMAT) == b"6"
        assert {key: value for key, value in db if key != keyspace.META_FORMAT} == before
        assert list(db.iterator(prefix=keyspace.WAIT_PREFIX)) == []
    finally:
        db.close()


def test_a_store_of_format_2_gets_its_scheduled_messages_keys_by_seq(tmp_path):
    """Format 3 finds a scheduled message by its seq (a peer that released it in a
    takeover names the seq alone): a store of format 2 gets those keys at start, and
    its scheduled messages are dropped by seq as well as released by time."""
    database = tmp_path / "db"
    store = Store.open(database)
    area = ScheduledArea(store)
    store.register(area)
    batch = store.begin()
    seqs = [batch.take_seq() for _ in range(2)]
    for seq, due in zip(seqs, (100, 200), strict=True):
        area.add(batch, "orders", due, seq, b"record %d" % due)
    store.commit(batch)
    store.close()
    db = plyvel.DB(str(database))  # as a release of format 2 wrote it: no keys by seq
    for seq in seqs:
        db.delete(keyspace.scheduled_seq_key(seq))
    db.put(keyspace.META_FORMAT, b"2", sync=True)
    db.close()

    store = Store.open(database)
    assert stored_format_of(store) == b"6"
    area = ScheduledArea(store)
    store.register(area)
    batch = store.begin()
    assert area.drop(batch, seqs[0]) and not area.drop(batch, 12345)
    store.commit(batch)
    assert (area.counts, area.next_due_us()) == ({"orders": 1}, 200)
    assert [message.seq for message in area.due(1000, 10)] == [seqs[1]]
    store.close()


def stored_format_of(store: Store) -> bytes | None:
    return store.get(keyspace.META_FORMAT)


@pytest.mark.parametrize("version", [b"3", None])
def test_a_store_of_format_3_gets_its_marks_in_blocks(tmp_path, version):
    """Format 4 keeps a group's marks in blocks of seqs: the keys a mark of a store of
    format 3 (or one made before versions) become blocks at start, merged with a block
    a pass cut short made already, and every group is done with what it was done with."""
    database = tmp_path / "db"
    Store.open(database).close()
    marks = {2: [0, 5, 1023, 1024, 5000], 7: [3, 4]}
    db = plyvel.DB(str(database))  # as a release of format 3 wrote them: a key a mark
    for group_id, seqs in marks.items():
        for seq in seqs:
            db.put(keyspace.group_done_key(group_id, seq), b"")
    db.put(keyspace.mark_block_key(7, 0), (1 << 9).to_bytes(2, "little"))  # made already
    marks[7].append(9)
    if version is None:
        db.delete(keyspace.META_FORMAT)
    else:
        db.put(keyspace.META_FORMAT, version, sync=True)
    db.close()

    store = Store.open(database)
    assert stored_format_of(store) == b"6"
    assert [keyspace.seq_at_end(key) for key, _ in store.iterate(
        keyspace.group_done_prefix(2))] == [0, 1024, 4096]
    topics = Topics(store, "default")
    for group_id, seqs in marks.items():
        assert topics.done_among(group_id, list(range(6000))) == set(seqs)
    store.close()


def format_4_store(database: Path) -> dict[int, list[tuple[int, bytes]]]:
    """A store of format 4 with two topics' logs as that format kept them (an entry a
    message under ``i``, value its tag), across blocks and with tags mixed in a block:
    the (seq, tag) of each topic's log, by topic id."""
    store = Store.open(database)
    topics = Topics(store, "default")
    store.register(topics)
    batch = store.begin()
    for name in ("orders", "audit"):
        topics.add_group(topics.topic(name, 0), "g", 0, "", 0)
    store.commit(batch)
    for number in range(5000):
        name, tag = ("orders", b"eu" if number % 3 else b"us") if number % 5 else ("audit", b"")
        batch = store.begin()
        value = record.encode(b"id", (b"TOPIC:" + name.encode(), b"TAG:" + tag), (b"m",), 1)
        seq = batch.add_message(value)
        topics.note_new(batch, seq, topics.topics[name], tag, len(value))
        store.commit(batch)
    logs = {topic.id: stored_log(store, topic.id) for topic in topics.topics.values()}
    store.close()
    db = plyvel.DB(str(database))  # as a release of format 4 wrote them: a key a message
    with db.write_batch() as batch:
        for key in db.iterator(prefix=keyspace.LOG_BLOCK_PREFIX, include_value=False):
            batch.delete(key)
        for topic_id, logged in logs.items():
            for seq, tag in logged:
                batch.put(keyspace.topic_log_key(topic_id, seq), tag)
    db.put(keyspace.META_FORMAT, b"4", sync=True)
    db.close()
    return logs


def assert_log_in_blocks(store: Store, logs: dict[int, list[tuple[int, bytes]]]) -> None:
    """No entry of format 4 left; every topic's log as it was; each group reads it."""
    assert stored_format_of(store) == b"6"
    assert list(store.iterate(keyspace.TOPIC_LOG_PREFIX)) == []
    topics = Topics(store, "default")
    for topic_id, logged in logs.items():
        assert stored_log(store, topic_id) == logged
        assert topics.logs.walk(topic_id) == logged
        (group,) = topics.by_id[topic_id].groups.values()
        assert group.backlog == len(logged)
        chunk = GroupArea(store, topics, group).read(0, 10_000)
        assert [seq for seq, _ in chunk.found] == [seq for seq, _ in logged]


def test_a_store_of_format_4_gets_its_topics_logs_in_blocks(tmp_path):
    """Format 5 keeps a topic's log in blocks of seqs by tag: the entries of a store of
    format 4 become blocks at start, in writes of whole blocks."""
    database = tmp_path / "db"
    logs = format_4_store(database)
    assert sum(map(len, logs.values())) == 5000
    store = Store.open(database)
    assert_log_in_blocks(store, logs)
    assert len(list(store.iterate(keyspace.LOG_BLOCK_PREFIX))) == 5 + 5 * 2  # blocks, tags
    store.close()


UPGRADE_STEPS = """
import sys
import plyvel
from pzq.store.store_format import log_into_blocks
db = plyvel.DB(sys.argv[1])
for done in log_into_blocks(db, entries_a_batch=1024):
    print(done, flush=True)
    if done >= 2048:
        sys.stdin.readline()  # (killed here)
"""


def test_an_upgrade_of_the_log_killed_midway_goes_on_at_the_next_start(tmp_path):
    """The log's upgrade killed (SIGKILL) after two of its writes, the store unclosed:
    the blocks written and the entries left are both there, and the next start goes on
    with the entries left, merging them into the blocks."""
    database = tmp_path / "db"
    logs = format_4_store(database)
    upgrading = subprocess.Popen([sys.executable, "-c", UPGRADE_STEPS, str(database)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert upgrading.stdout is not None
        steps = [int(upgrading.stdout.readline()) for _ in range(2)]
        assert 1024 <= steps[0] < 2048 <= steps[1] < 5000
    finally:
        upgrading.send_signal(signal.SIGKILL)
        upgrading.wait(timeout=20)
    db = plyvel.DB(str(database))
    try:
        entries_left = sum(1 for _ in db.iterator(prefix=keyspace.TOPIC_LOG_PREFIX))
        blocks = sum(1 for _ in db.iterator(prefix=keyspace.LOG_BLOCK_PREFIX))
        assert (entries_left, db.get(keyspace.META_FORMAT)) == (5000 - steps[1], b"4")
        assert blocks > 0
    finally:
        db.close()
    store = Store.open(database)
    assert_log_in_blocks(store, logs)
    store.close()


# -- a store made by the release before format versions ----------------------------------------

@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text())


def copy_of(tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name
    shutil.copytree(FIXTURE / name, copy)
    return copy


def take(consumer, count: int) -> list[str]:
    """Up to ``count`` deliveries' first parts, acked; then a look for one more."""
    got = []
    while len(got) < count:
        message = consumer.receive(10)
        if message is None:
            break
        got.append(message.parts[0].decode())
        message.ack()
    extra = consumer.receive(0.3)
    if extra is not None:
        got.append(extra.parts[0].decode())
    return got


def test_a_store_of_format_1_delivers_every_message_to_every_group(start_node, context,
                                                                    tmp_path, expected):
    database = copy_of(tmp_path, "node-a")
    assert stored_format(database) is None  # made before versions were kept
    node = start_node(database=database, consume=True)
    assert node.event("store_format_recorded")["format"] == STORE_FORMAT
    assert node.stats()["node_id"] == expected["node_a"]
    dead = node.ask("DEAD")
    assert dead.startswith("dead_letters: 1\n")
    assert " poison-0 " in dead
    for name, wanted in expected["deliveries"].items():
        if name == "default":
            with Consumer(node.send_dsn, context=context) as consumer:
                assert take(consumer, len(wanted)) == wanted, name
            continue
        topic, group = name.split(":")
        with GroupConsumer(node.consume_dsn, topic, group, window=10,
                           context=context) as consumer:
            assert take(consumer, len(wanted)) == wanted, name
    node.stop()
    assert stored_format(database) == str(STORE_FORMAT).encode()


def test_a_store_of_format_1_keeps_its_settings_dead_letters_and_copies(tmp_path, expected):
    store = Store.open(copy_of(tmp_path, "node-a"))
    try:
        topics = Topics(store, "default")
        for name, settings in expected["topics"].items():
            topic = topics.topics[name]
            assert (topic.max_messages, topic.max_bytes, topic.dedup_window_us) == (
                settings["max_messages"], settings["max_bytes"], settings["dedup_window_us"])
            assert sorted(topic.groups) == sorted(settings["groups"])
            for group_name, wanted in settings["groups"].items():
                group = topic.groups[group_name]
                assert {"filter": group.filter, "ack_timeout_us": group.ack_timeout_us,
                        "max_deliveries": group.max_deliveries,
                        "backoff_us": list(group.backoff_us)} == wanted, group_name
        own = [record.decode(value).parts[0].decode()
               for _, value in store.iterate(keyspace.OWN_PREFIX)]
        assert own == expected["a_stored"]
        assert [{"msg_id": stored.msg_id.decode(),
                 "parts": [part.decode() for part in stored.parts]}
                for stored in (record.decode(value) for _, value
                               in store.iterate(keyspace.DEAD_PREFIX))] == expected["dead_letters"]
        assert copies(store, expected["node_b"]) == expected["a_holds_of_b"]
    finally:
        store.close()
    store = Store.open(copy_of(tmp_path, "node-b"))
    try:
        assert copies(store, expected["node_a"]) == expected["b_holds_of_a"]
    finally:
        store.close()


def copies(store: Store, origin: str) -> list[str]:
    """The first parts of the copies ``store`` holds of ``origin``'s messages."""
    return [record.decode(split_value(value)[1]).parts[0].decode()
            for _, value in store.iterate(keyspace.replica_prefix(origin.encode()))]


# -- a cluster of this release and the previous one ---------------------------------------------

@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> Path:
    """The previous release's pzq package, from this clone's git history."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e",
                            f"{PREVIOUS_RELEASE}^{{commit}}"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"the previous release (commit {PREVIOUS_RELEASE[:7]}) is not in this "
                    "clone's git history (a shallow clone, or no git)")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar",
                              PREVIOUS_RELEASE, "pzq"], capture_output=True, check=True)
    place = tmp_path_factory.mktemp("previous-release")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(place, filter="data")
    return place


def produce(node, context, count: int, prefix: bytes) -> None:
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for i in range(count):
            producer.send([b"%s %d" % (prefix, i)])
        acks = producer.flush(15)
    assert [(ack.ok, ack.status_message) for ack in acks] == [(True, b"")] * count


def consume(node, context, count: int) -> list[bytes]:
    with Consumer(node.send_dsn, context=context) as consumer:
        got = []
        for _ in range(count):
            message = consumer.receive(15)
            assert message is not None, f"{len(got)} of {count} delivered"
            got.append(message.parts[0])
            message.ack()
    return sorted(got)


def peer(node) -> dict:
    return node.stats()["peers"][0]


def mixed_pair(start_node, tmp_path, previous_release):
    """A node of this release and one of the previous, each the other's only peer
    (--replicas 1, --timeout-nodes 2s)."""
    here, there = f"ipc://{tmp_path}/new-cluster", f"ipc://{tmp_path}/old-cluster"
    options = ("--replicas", "1", "--timeout-nodes", "2s")
    new = start_node("--broadcast-dsn", here, "--nodes", there, *options)
    old = start_node("--broadcast-dsn", there, "--nodes", here, *options,
                     env={"PYTHONPATH": str(previous_release)})
    return new, old


def test_a_node_of_the_previous_release_copies_and_takes_over_beside_this_one(
        start_node, context, tmp_path, previous_release):
    new, old = mixed_pair(start_node, tmp_path, previous_release)
    new.wait_stats(lambda s: s["peers"][0]["reachable"] and s["peers"][0]["protocol"] == 1,
                   message="the old peer heard, protocol 1")
    old.wait_stats(lambda s: s["peers"][0]["reachable"], message="the new peer reached")
    assert "protocol" not in peer(old)  # the previous release's daemon indeed

    produce(new, context, 20, b"new")  # each ACK waited for the old node's copy
    produce(old, context, 20, b"old")
    assert peer(new)["replicas_held"] == peer(old)["replicas_held"] == 20
    assert consume(new, context, 20) == sorted(b"new %d" % i for i in range(20))
    assert consume(old, context, 20) == sorted(b"old %d" % i for i in range(20))
    new.wait_stats(lambda s: s["replicas_held"] == 0, message="old's copies removed")
    old.wait_stats(lambda s: s["replicas_held"] == 0, message="new's copies removed")

    with Producer(new.receive_dsn, context=context) as producer:
        # no SCHEDULE to a node of protocol 1: stored here alone, as that release did
        later = producer.produce([b"later"], delay=3600)
    assert later.ok and later.replication_failed, later
    assert old.stats()["cluster_rejected"] == 0  # it read every frame of this release
    produce(old, context, 5, b"kept")
    old.kill()
    assert consume(new, context, 5) == sorted(b"kept %d" % i for i in range(5))  # taken over
    assert new.stats()["cluster_rejected"] == 0
    said = [event for event in new.events if event.get("event") == "peer_protocol_older"]
    assert [(event["peer_protocol"], event["protocol"]) for event in said] == [
        (1, CLUSTER_PROTOCOL)]  # once, for all the heartbeats


def test_a_node_of_this_release_stopped_by_sigterm_says_no_leaving_to_a_previous_one(
        start_node, tmp_path, previous_release):
    """LEAVING goes only to peers of protocol 4 or later: the previous release would
    refuse it as an unknown frame (cluster_rejected). It counts the node down by its
    timer, as before."""
    new, old = mixed_pair(start_node, tmp_path, previous_release)
    new.wait_stats(lambda s: s["peers"][0]["reachable"] and s["peers"][0]["protocol"] == 1,
                   message="the old peer heard, protocol 1")
    old.wait_stats(lambda s: s["peers"][0]["reachable"], message="the new peer reached")
    assert new.stop() == 0
    old.wait_stats(lambda s: s["peers"][0]["state"] == "down", message="down by its timer")
    assert old.stats()["cluster_rejected"] == 0


def test_pzq_ctl_backup_of_a_previous_release_s_node_says_how_to_back_it_up(
        start_node, tmp_path, previous_release):
    """The release before versions has no BACKUP, and it is the one an upgrade cannot go
    back to but on a backup: pzq-ctl passed on its 'unknown command' alone."""
    old = start_node(env={"PYTHONPATH": str(previous_release)})
    result = subprocess.run([str(Path(sys.executable).parent / "pzq-ctl"), "--dsn",
                             old.monitor_dsn, "backup", str(tmp_path / "copy")],
                            capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL, check=False)
    assert (result.returncode, result.stderr.strip()) == (1, (
        "pzq-ctl: error: this node's release has no backups (it answers BACKUP with "
        "unknown command): stop the node and copy its --database and --archive-dir (cp -a) "
        "while it is stopped; that copy is the backup to go back on"))
    assert not (tmp_path / "copy").exists()
