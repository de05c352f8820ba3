"""The offset index per segment, size retention and ``pzq-archive offsets``."""

from __future__ import annotations

import random

import pytest

from pzq.archive.format.codec import encode_records
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.files import seek, topic_items
from pzq.archive.format.index import ENTRY, INDEX_BYTES, OffsetIndex, index_path, read_index
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import TopicLog, list_segments
from tests.support.archive_damage import archive_tool, damage_metadata, message, write_archive

pytestmark = pytest.mark.timeout(60)


def varied(n: int) -> ArchivedMessage:
    """Messages of sizes from a few bytes to a few KiB, so records straddle entries."""
    body = bytes([n % 251]) * random.Random(n).choice((3, 40, 300, 2000, 6000))
    return ArchivedMessage(b"k%08d" % n, b"m%d" % n, "orders", 1, 2, 3, 1, "n1", (body,))


def write_varied(directory, count: int = 600, segment_size: int = 400_000) -> list[int]:
    archive = Archive(directory, segment_size=segment_size)
    archive.open(now=0)
    offsets = [archive.append(varied(n), now=0) for n in range(count)]
    archive.close(now=0)
    return offsets


def items_from(directory, begin: int) -> list[tuple[int, int, str]]:
    return [(item.offset, item.size, type(item).__name__)
            for item in topic_items(directory, "orders", begin)]


def index_entries(directory) -> list[list[int]]:
    return [[value for (value,) in ENTRY.iter_unpack(index_path(s.path).read_bytes())]
            for s in list_segments(directory / "orders")]


def test_index_seek_equals_a_linear_scan_at_random_offsets(tmp_path):
    offsets = write_varied(tmp_path)
    segments = list_segments(tmp_path / "orders")
    assert len(segments) > 2
    linear = items_from(tmp_path, 0)
    for begin in random.Random(16).sample(offsets, 40):
        assert items_from(tmp_path, begin) == [item for item in linear if item[0] >= begin]
        segment = [s for s in segments if s.start <= begin][-1]
        data = segment.path.read_bytes()
        index = read_index(segment.path, data, False)
        assert index is not None
        start = seek(data, index, begin - segment.start, raw=False)
        # The walk starts near the offset, not at the segment's start.
        assert begin - segment.start - start < INDEX_BYTES + 6100


def test_fetch_uses_the_index_and_refuses_an_offset_inside_a_record(tmp_path):
    offsets = write_varied(tmp_path, count=300)
    log = TopicLog(tmp_path / "orders", 400_000, 10_000, 1.0)
    log.open(now=0)
    whole = b"".join(s.path.read_bytes() for s in list_segments(tmp_path / "orders"))
    for begin in random.Random(7).sample(offsets, 30):
        reply = log.read(begin, 1)  # at least one record
        assert whole[begin:begin + len(reply)] == reply
        assert begin + len(reply) in set(offsets) | {log.end_offset}
        with pytest.raises(ValueError, match="not a record start"):
            log.read(begin + 1, 1 << 20)
    log.close(now=0)


@pytest.mark.parametrize("harm", ["deleted", "torn", "not_ascending", "past_the_end",
                                  "last_not_a_record_start"])
def test_a_missing_or_torn_index_is_rebuilt_at_the_first_fetch_there(tmp_path, harm):
    write_varied(tmp_path, count=400)
    before = index_entries(tmp_path)
    assert all(len(entries) > 3 for entries in before)
    first = index_path(list_segments(tmp_path / "orders")[0].path)
    raw = first.read_bytes()
    harmed = {"deleted": None, "torn": raw[:-3],
              "not_ascending": raw[:8] + raw[16:24] + raw[8:16] + raw[24:],
              "past_the_end": raw + ENTRY.pack(10**9),
              "last_not_a_record_start": raw + ENTRY.pack(ENTRY.unpack(raw[-8:])[0] + 1)}[harm]
    if harmed is None:
        first.unlink()
    else:
        first.write_bytes(harmed)
    segment = list_segments(tmp_path / "orders")[0]
    assert read_index(segment.path, segment.path.read_bytes(), False) is None
    archive = Archive(tmp_path, segment_size=400_000)
    archive.open(now=0)
    log = archive.log("orders")
    assert log is not None and log.read(0, 100)  # a FETCH in the first segment
    archive.close(now=0)
    assert index_entries(tmp_path) == before


def test_the_index_follows_a_torn_tail_cut_and_new_appends(tmp_path):
    offsets = write_varied(tmp_path, count=200, segment_size=10**9)
    (segment,) = list_segments(tmp_path / "orders")
    whole = segment.size
    with segment.path.open("ab") as handle:
        handle.write(b"\x01\x05abc")  # a torn write
    archive = Archive(tmp_path, segment_size=10**9)
    archive.open(now=0)
    assert segment.size == whole  # its 5 bytes cut
    more = [archive.append(varied(n), now=0) for n in range(200, 260)]
    archive.close(now=0)
    data = segment.path.read_bytes()
    rebuilt = OffsetIndex.build(data, False)
    assert index_entries(tmp_path) == [rebuilt.entries]
    assert [item[0] for item in items_from(tmp_path, 0)] == offsets + more


def test_an_index_seek_reports_damage_as_a_linear_walk_does(tmp_path):
    offsets = write_archive(tmp_path, count=400, segment_size=10**9)
    damage_metadata(tmp_path, "orders", offsets[150])
    linear = items_from(tmp_path, 0)
    for begin in offsets[140:170]:
        assert items_from(tmp_path, begin) == [
            item for item in linear if item[0] >= begin
            or (item[2] == "DamagedRecord" and item[0] + item[1] > begin)]


def test_size_retention_deletes_the_oldest_whole_segments_past_the_size(tmp_path):
    archive = Archive(tmp_path, segment_size=2000, retain_bytes=7000)
    archive.open(now=0)
    for n in range(300):
        archive.append(message(n), now=0)
    log = archive.log("orders")
    assert log is not None
    sizes_before = [s.size for s in log.segments]
    assert sum(sizes_before) > 7000 and len(sizes_before) > 5
    deleted = archive.apply_retention(now=1)  # nothing is old: only the size counts
    assert deleted > 0
    remaining = list_segments(tmp_path / "orders")
    assert [s.start for s in remaining] == [s.start for s in log.segments]
    assert sum(s.size for s in remaining) <= 7000 == archive.retain_bytes
    assert sum(s.size for s in remaining) + sizes_before[deleted - 1] > 7000  # not one more
    assert not index_path(list_segments(tmp_path / "orders")[0].path.with_name(
        f"{0:020d}.dat")).exists()
    archive.close(now=1)


def test_size_retention_never_deletes_the_active_segment(tmp_path):
    archive = Archive(tmp_path, segment_size=10**9, retain_bytes=10)
    archive.open(now=0)
    for n in range(50):
        archive.append(message(n), now=0)
    assert archive.apply_retention(now=1) == 0
    assert len(list_segments(tmp_path / "orders")) == 1
    archive.close(now=1)


def test_offsets_names_first_flushed_and_last(tmp_path):
    """Each in bytes, named: it printed "first 0 whole 70180 last 70186"."""
    write_archive(tmp_path, count=300, segment_size=5000)
    segments = list_segments(tmp_path / "orders")
    end = segments[-1].start + segments[-1].size
    with segments[-1].path.open("ab") as handle:
        handle.write(b"\x01\x09torn")
    ran = archive_tool("offsets", str(tmp_path), "orders")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == (f"orders: byte offsets in its log: first kept {segments[0].start}, "
                          f"end of whole records {end}, end of bytes {end + 6} (a torn tail "
                          "of 6 bytes)\n")
    segments[-1].path.write_bytes(segments[-1].path.read_bytes()[:-6])
    whole = archive_tool("offsets", str(tmp_path), "orders")
    assert whole.stdout == (f"orders: byte offsets in its log: first kept {segments[0].start}, "
                            f"end of whole records {end}, end of bytes {end}\n")
    unknown = archive_tool("offsets", str(tmp_path), "ordres")
    assert unknown.returncode == 2
    assert unknown.stderr == (f"pzq-archive: error: no topic 'ordres' in {tmp_path}; "
                              "topics: orders\n")


def test_damage_in_a_raw_topic_resumes_at_the_next_indexed_record_start(tmp_path):
    from pzq.archive.damage import DamagedRecord
    from pzq.archive.format.records import RawRecord

    archive = Archive(tmp_path, segment_size=10**9)
    archive.open(now=0)
    offsets = archive.append_raw("clicks", [[b"id-%d" % n, b"y" * 300] for n in range(60)],
                                 now=0)
    offsets += [archive.append_raw("clicks", [[b"id-%d" % n, b"y" * 300]], now=0)[0]
                for n in range(60, 100)]  # in one batch, then one by one
    archive.close(now=0)
    (segment,) = list_segments(tmp_path / "clicks")
    data = bytearray(segment.path.read_bytes())
    data[offsets[20]] = 0x80  # a flag byte with an unknown bit
    segment.path.write_bytes(bytes(data))
    entries = index_entries_of(tmp_path, "clicks")
    resume = next(entry for entry in entries if entry > offsets[20])
    items = list(topic_items(tmp_path, "clicks"))
    damaged = [item for item in items if isinstance(item, DamagedRecord)]
    assert [(d.offset, d.offset + d.size) for d in damaged] == [(offsets[20], resume)]
    records = [item.offset for item in items if isinstance(item, RawRecord)]
    assert records == offsets[:20] + [o for o in offsets if o >= resume]
    log = TopicLog(tmp_path / "clicks", 10**9, 10_000, 1.0)
    log.open(now=0)
    assert log.raw
    assert log.read(offsets[19], 1 << 20) == bytes(data[offsets[19]:offsets[20]])  # stops
    assert log.read(offsets[20], 1 << 20) == bytes(data[offsets[20]:resume])  # alone
    assert log.damaged_records == 1
    log.close(now=0)


def index_entries_of(directory, topic: str) -> list[int]:
    (segment,) = list_segments(directory / topic)
    return [value for (value,) in ENTRY.iter_unpack(index_path(segment.path).read_bytes())]


def test_the_active_segment_s_index_is_rebuilt_when_the_topic_opens(tmp_path):
    write_varied(tmp_path, count=400)
    before = index_entries(tmp_path)
    index_path(list_segments(tmp_path / "orders")[-1].path).unlink()
    archive = Archive(tmp_path, segment_size=400_000)
    archive.open(now=0)
    assert index_path(list_segments(tmp_path / "orders")[-1].path).exists()
    archive.close(now=0)
    assert index_entries(tmp_path) == before


def test_pzq_archive_shows_a_raw_topic(tmp_path):
    archive = Archive(tmp_path, segment_size=10**9)
    archive.open(now=0)
    offsets = archive.append_raw("clicks", [[b"id-%d" % n, b"page %d" % n] for n in range(3)],
                                 now=0)
    archive.close(now=0)
    topics = archive_tool("topics", str(tmp_path))
    assert topics.stdout.splitlines()[0] == (
        f"clicks: byte offsets 0..{offsets[-1] + 14}, 1 segment(s), {offsets[-1] + 14} bytes, "
        "raw ZPER records")
    dump = archive_tool("dump", str(tmp_path), "clicks", "--from", str(offsets[1]))
    assert dump.returncode == 0 and dump.stdout.splitlines() == [
        f"{offsets[1]} id-1 | page 1", f"{offsets[2]} id-2 | page 2"]
    (segment,) = list_segments(tmp_path / "clicks")
    verify = archive_tool("verify", str(segment.path))
    assert verify.returncode == 0 and "ok" in verify.stdout


def test_a_batch_of_raw_writes_rolls_segments_as_single_appends_do(tmp_path):
    batch = [[b"id-%d" % n, b"z" * (n * 37 % 500)] for n in range(300)]
    one_by_one, together = Archive(tmp_path / "a", segment_size=5000), \
        Archive(tmp_path / "b", segment_size=5000)
    for archive in (one_by_one, together):
        archive.open(now=0)
    offsets_a = [one_by_one.append_raw("t", [frames], now=0)[0] for frames in batch]
    offsets_b = together.append_raw("t", batch, now=0)
    for archive in (one_by_one, together):
        archive.close(now=0)
    assert offsets_a == offsets_b
    segments_a = list_segments(tmp_path / "a" / "t")
    segments_b = list_segments(tmp_path / "b" / "t")
    assert [s.start for s in segments_a] == [s.start for s in segments_b] and len(segments_a) > 5
    assert [s.path.read_bytes() for s in segments_a] == [s.path.read_bytes() for s in segments_b]
    assert [index_path(s.path).read_bytes() for s in segments_a] == \
        [index_path(s.path).read_bytes() for s in segments_b]


def test_records_encoded_together_are_written_as_appended_one_by_one(tmp_path):
    # Frames around the short form's limit, records past a segment's end, a roll
    # before the first record: the bytes, offsets and index of each record alone.
    records = [[b"id-%d" % n, b"v" * (250 + n % 9), b"w" * (n * 53 % 700)] for n in range(200)]
    alone = TopicLog(tmp_path / "a", 6000, 10_000, 1.0)
    together = TopicLog(tmp_path / "b", 6000, 10_000, 1.0)
    for log in (alone, together):
        log.open(now=0)
    offsets_a, full_after = [], []
    for frames in records:
        offsets_a.append(alone.append(frames, now=0))
        full_after.append(alone._active_size >= alone.segment_size)
    cut = full_after.index(True, 100) + 1  # the second write starts with a roll
    data, starts = encode_records(records[:cut])
    first = together.append_encoded(data, starts, now=0)
    data, rest = encode_records(records[cut:])
    second = together.append_encoded(bytes(data), rest, now=0)
    assert offsets_a == [first + start for start in starts] + [second + start for start in rest]
    last_a, last_b = (log._reads.index(log.segments[-1].start) for log in (alone, together))
    assert (last_a.entries, last_a.covered, last_a.whole_until) == \
        (last_b.entries, last_b.covered, last_b.whole_until)
    for log in (alone, together):
        log.close(now=0)
    segments_a, segments_b = (list_segments(tmp_path / name) for name in "ab")
    assert [s.start for s in segments_a] == [s.start for s in segments_b] and len(segments_a) > 5
    assert [s.path.read_bytes() for s in segments_a] == [s.path.read_bytes() for s in segments_b]
    assert [index_path(s.path).read_bytes() for s in segments_a] == \
        [index_path(s.path).read_bytes() for s in segments_b]
