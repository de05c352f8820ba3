"""FETCH replies from the segments' mappings: no copy, records walked once, and a
segment changed on disk walked again under the damage rule."""

from __future__ import annotations

import mmap
import os
import random

import pytest

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.archive import Archive
from tests.support.archive_damage import damage_metadata

pytestmark = pytest.mark.timeout(60)


def varied(n: int) -> ArchivedMessage:
    body = bytes([n % 251]) * random.Random(n).choice((3, 40, 300, 2000, 6000))
    return ArchivedMessage(b"k%08d" % n, b"m%d" % n, "orders", 1, 2, 3, 1, "n1", (body,))


def open_archive(directory) -> Archive:
    archive = Archive(directory, segment_size=200_000)
    archive.open(now=0)
    return archive


def replies(archive: Archive, starts: list[int], sizes: tuple[int, ...]) -> list[bytes]:
    log = archive.log("orders")
    assert log is not None
    return [bytes(log.read(start, size)) for start in starts for size in sizes]


def test_a_reply_is_a_view_of_the_segment_not_a_copy(tmp_path):
    archive = open_archive(tmp_path)
    offsets = [archive.append(varied(n), now=0) for n in range(50)]
    log = archive.log("orders")
    assert log is not None
    reply = log.read(offsets[3], 1 << 20)
    assert isinstance(reply, memoryview) and isinstance(reply.obj, mmap.mmap)
    whole = bytes(reply)
    for n in range(50, 400):  # the segment grows and rolls: the reply stays readable
        archive.append(varied(n), now=0)
    assert log.apply_retention(now=10**10, retain_s=0) > 0  # its segment deleted too
    assert offsets[3] < log.start_offset and bytes(reply) == whole
    archive.close(now=0)


def test_replies_where_the_node_knows_the_records_equal_a_walk_of_each(tmp_path):
    """What the node appended is not walked record by record; the replies must be
    the same as a fresh node's, which walks every record it serves."""
    archive = open_archive(tmp_path)
    offsets = [archive.append(varied(n), now=0) for n in range(600)]
    log = archive.log("orders")
    assert log is not None and len(log.segments) > 3
    starts = random.Random(28).sample(offsets, 60)
    sizes = (1, 500, 4096, 10_000, 1 << 20)
    known = replies(archive, starts, sizes)
    archive.close(now=0)
    fresh = open_archive(tmp_path)
    assert replies(fresh, starts, sizes) == known  # walked: the first read of each
    assert replies(fresh, starts, sizes) == known  # known whole since
    fresh.close(now=0)


def test_a_closed_segment_changed_on_disk_is_walked_again(tmp_path):
    archive = open_archive(tmp_path)
    offsets = [archive.append(varied(n), now=0) for n in range(600)]
    log = archive.log("orders")
    assert log is not None
    first = log.segments[0]
    inside = [offset for offset in offsets if offset < log.segments[1].start]
    assert log.read(0, 1 << 20)  # known whole up to here, by the node's appends
    target = inside[len(inside) // 2]
    damage_metadata(tmp_path, "orders", target)
    os.utime(first.path, ns=(1, 1))  # a changed file, also on a coarse clock
    reply = log.read(0, 1 << 20)
    assert len(reply) == target  # stops before the damaged record, as a walk does
    following = inside[inside.index(target) + 1]
    assert len(log.read(target, 1 << 20)) == following - target  # the damaged one alone
    assert log.damaged_records == 1
    archive.close(now=0)


def test_reading_many_segments_keeps_few_files_open(tmp_path):
    archive = Archive(tmp_path, segment_size=2_000)
    archive.open(now=0)
    for n in range(400):
        archive.append(varied(n % 3), now=0)  # small records: many segments
    log = archive.log("orders")
    assert log is not None and len(log.segments) > 100
    open_before = len(os.listdir("/proc/self/fd"))
    assert all(len(log.read(segment.start, 1 << 20)) for segment in log.segments)
    # Each mapping holds a file descriptor: not one per segment read (a reply kept
    # would keep its own).
    assert len(os.listdir("/proc/self/fd")) - open_before <= 40
    archive.close(now=0)
