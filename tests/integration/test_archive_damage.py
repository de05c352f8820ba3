"""One rule for damaged archive records, in every reader: reported with topic, segment
and offset, counted, skipped to the next whole record (pzq.archive.format.records)."""

from __future__ import annotations

import re

import pytest
import zmq

from pzq.archive.format.files import read_topic
from pzq.archive.reader import ArchiveReader
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import list_segments
from pzq.protocol import zper as zp
from tests.support.archive_damage import (
    archive_tool,
    damage_metadata,
    message,
    metadata_span,
    overwrite,
    segment_of,
    write_archive,
)
from tests.support.harness import produce_and_consume, scrape_metrics

pytestmark = pytest.mark.timeout(60)
DAMAGED = 400  # the index of the damaged record among 900


@pytest.fixture
def damaged_archive(tmp_path):
    """900 messages; three bytes of record 400's metadata changed."""
    offsets = write_archive(tmp_path)
    changed = damage_metadata(tmp_path, "orders", offsets[DAMAGED])
    return tmp_path, offsets, changed


def test_verify_checks_metadata_and_names_the_first_bad_byte(damaged_archive):
    directory, offsets, changed = damaged_archive
    start, length = metadata_span(directory, "orders", offsets[DAMAGED])
    assert offsets[DAMAGED] < start < changed < start + length < offsets[DAMAGED + 1]
    segment = segment_of(directory, "orders", changed)
    verified = archive_tool("verify", str(segment.path))
    assert verified.returncode == 1, verified.stdout
    assert (f"record metadata is not UTF-8 at byte {changed - segment.start} "
            f"(in the record at byte {offsets[DAMAGED] - segment.start})") in verified.stdout
    others = [s for s in list_segments(directory / "orders") if s != segment]
    assert all(archive_tool("verify", str(s.path)).returncode == 0 for s in others)


def test_dump_prints_every_other_record_and_one_warning_line(damaged_archive):
    directory, offsets, changed = damaged_archive
    dumped = archive_tool("dump", str(directory), "orders")
    printed = [int(line.split()[0]) for line in dumped.stdout.splitlines()]
    assert printed == offsets[:DAMAGED] + offsets[DAMAGED + 1:]
    assert "Traceback" not in dumped.stderr
    (warning,) = dumped.stderr.strip().splitlines()
    segment = segment_of(directory, "orders", changed).path.name
    assert warning.startswith(f"pzq-archive: warning: damaged record in topic orders, "
                              f"segment {segment}, offset {offsets[DAMAGED]}: ")
    assert f"first bad byte at offset {changed}" in warning
    assert dumped.returncode == 1  # the output is whole but for what it says it skipped


def test_read_topic_reports_and_skips(damaged_archive):
    directory, offsets, changed = damaged_archive
    reported: list = []  # of DamagedRecord
    read = list(read_topic(directory, "orders", on_damage=reported.append))
    assert [offset for offset, _ in read] == offsets[:DAMAGED] + offsets[DAMAGED + 1:]
    (damaged,) = reported
    assert (damaged.topic, damaged.offset, damaged.size, damaged.first_bad) == (
        "orders", offsets[DAMAGED], offsets[DAMAGED + 1] - offsets[DAMAGED], changed)
    assert damaged.segment == segment_of(directory, "orders", changed).path.name


def test_a_torn_closed_segment_is_damage(tmp_path):
    offsets = write_archive(tmp_path, count=200, segment_size=5000)
    first, second, *_ = list_segments(tmp_path / "orders")
    first.path.write_bytes(first.path.read_bytes()[:-3])  # cut short: a closed segment
    reported: list = []  # of DamagedRecord
    read = [offset for offset, _ in read_topic(tmp_path, "orders", on_damage=reported.append)]
    (damaged,) = reported
    assert damaged.segment == first.path.name and "closes segments whole" in damaged.reason
    assert read == [offset for offset in offsets if offset != damaged.offset]


def test_damage_in_the_last_segment_is_not_cut_at_restart(tmp_path):
    offsets = write_archive(tmp_path, count=20, segment_size=10**6)
    segment = overwrite(tmp_path, "orders", offsets[5], b"\x80")  # a bad flag byte mid-segment
    size = segment.size
    archive = Archive(tmp_path, segment_size=10**6)
    archive.open(now=0)
    assert segment.size == size  # before: everything from the bad byte was cut
    archive.append(message(99), now=0)
    archive.close(now=0)
    read = [m.msg_id for _, m in read_topic(tmp_path, "orders", on_damage=lambda _: None)]
    assert read == [b"m%d" % n for n in range(20) if n != 5] + [b"m99"]


def test_a_zero_filled_tail_is_cut_at_restart(tmp_path):
    offsets = write_archive(tmp_path, count=5, segment_size=10**6)
    (segment,) = list_segments(tmp_path / "orders")
    end = segment.size
    with segment.path.open("ab") as handle:
        handle.write(bytes(64))  # a power cut after the size, before the data, was written
    archive = Archive(tmp_path, segment_size=10**6)
    archive.open(now=0)
    assert segment.size == end  # the 64 bytes cut
    assert archive.append(message(5), now=0) == end
    archive.close(now=0)
    assert len(list(read_topic(tmp_path, "orders"))) == len(offsets) + 1


@pytest.mark.parametrize("max_bytes", [300, 1 << 20], ids=["small-fetches", "one-fetch"])
def test_zper_readers_skip_a_damaged_record_on_a_running_node(archived_node, context,
                                                              open_socket, max_bytes):
    produce_and_consume(archived_node, context, 40)
    archived_node.wait_stats(lambda s: s["archive"]["archived"] == 40, message="archived")
    directory = archived_node.archive_dir
    offsets = [offset for offset, _ in read_topic(directory, "even")]
    target = offsets[len(offsets) // 2]
    assert 0 < target < list_segments(directory / "even")[-1].start  # in a closed segment
    damage_metadata(directory, "even", target)
    following = offsets[offsets.index(target) + 1]

    reported: list = []  # of DamagedRecord
    with ArchiveReader(archived_node.archive_dsn, "even", context=context,
                       on_damage=reported.append) as reader:
        read = [offset for offset, _ in reader.messages(max_bytes=max_bytes)]
    assert read == [offset for offset in offsets if offset != target]
    (damaged,) = reported
    assert (damaged.topic, damaged.segment, damaged.offset, damaged.size) == (
        "even", segment_of(directory, "even", target).path.name, target, following - target)
    assert reader.damaged == reported
    archived_node.wait_stats(
        lambda s: s["archive"]["topics"]["even"]["damaged_records"] == 1, message="counted")
    metrics = scrape_metrics(archived_node.monitor_dsn)
    assert re.search(r'pzq_archive_damaged_records_total\{[^}]*topic="even"[^}]*\} 1\.0',
                     metrics), metrics

    raw = open_socket(zmq.DEALER)  # a ZPER reader: exactly the damaged bytes, offsets stay right
    raw.setsockopt(zmq.IDENTITY, zp.make_identity("even"))
    raw.connect(archived_node.archive_dsn)
    for offset, status, length in ((target, zp.OK, following - target),
                                   (target + 1, zp.INVALID_OFFSET, None)):
        raw.send_multipart(zp.encode_fetch_request(offset, 1 << 20))
        assert raw.poll(10_000)
        reply = raw.recv_multipart()
        assert reply[0][0] == status
        assert length is None or len(reply[1]) == length
    assert archived_node.figures()["messages"] == 0  # the node kept running and serving


def test_a_restarted_node_serves_past_damage_in_segments_it_did_not_write(
        start_node, tmp_path, context, open_socket):
    args = ("--archive-dir", str(tmp_path / "archive"), "--archive-dsn", "tcp://127.0.0.1:*",
            "--segment-size", "600", "--ack-timeout", "60000000")
    first = start_node(*args)
    produce_and_consume(first, context, 40)
    first.wait_stats(lambda s: s["archive"]["archived"] == 40, message="archived")
    first.stop()
    directory = tmp_path / "archive"
    offsets = [offset for offset, _ in read_topic(directory, "odd")]
    target = offsets[3]
    overwrite(directory, "odd", target, b"\x80")  # a bad flag byte: the frames break
    following = offsets[4]

    node = start_node(*args)
    dsn = node.event("node_ready")["archive"]
    reported: list = []
    with ArchiveReader(dsn, "odd", context=context, on_damage=reported.append) as reader:
        assert [o for o, _ in reader.messages()] == offsets[:3] + offsets[4:]
    assert [(d.offset, d.size) for d in reported] == [(target, following - target)]
    raw = open_socket(zmq.DEALER)
    raw.setsockopt(zmq.IDENTITY, zp.make_identity("odd"))
    raw.connect(dsn)
    raw.send_multipart(zp.encode_fetch_request(offsets[1] + 3, 1 << 20))  # inside a record
    assert raw.poll(10_000) and raw.recv_multipart() == [bytes((zp.INVALID_OFFSET,))]

