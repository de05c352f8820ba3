"""The ZPER segment log: frames, records, rolling, flushing, retention and recovery."""

from __future__ import annotations

import os

import pytest
import structlog

from pzq.archive.format.codec import encode_record
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.records import Damaged, MessageRecord, TornTail, decode_records, walk
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.topiclog import TopicLog, list_segments
from pzq.errors import ArchiveFormatError
from pzq.protocol.headers import validate_topic

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("length", [0, 1, 254, 255, 256, 65536, 70000])
def test_frame_round_trip_at_length_boundaries(length):
    payload = bytes(range(256)) * (length // 256) + bytes(length % 256)
    encoded = encode_record([payload])
    header = 2 if length <= 255 else 9  # ZMTP/2.0's rule, as ZPER's clients count
    assert len(encoded) == header + length
    assert encoded[0] == (0x02 if length > 255 else 0x00)
    if length > 255:
        assert encoded[1:9] == length.to_bytes(8, "big")
    else:
        assert encoded[1] == length
    assert list(decode_records(encoded)) == [(0, [payload])]


def whole_length(data: bytes) -> int:
    """How many bytes are whole records, as a reader walks them (a torn tail is not)."""
    tail = [item for item in walk(data, raw=True) if isinstance(item, TornTail)]
    return tail[0].offset if tail else len(data)


def long_form(frames: list[bytes]) -> bytes:
    """A record as pzq wrote it before: every frame with an 8-byte length."""
    last = len(frames) - 1
    return b"".join(bytes((0x02 | (0x01 if at < last else 0),)) + len(frame).to_bytes(8, "big")
                    + frame for at, frame in enumerate(frames))


def test_a_255_byte_frame_in_the_long_form_still_reads():
    old = long_form([b"k" * 255, b"v" * 255])
    new = encode_record([b"n" * 255])
    assert len(old) == 2 * (9 + 255) and len(new) == 2 + 255
    data = old + new
    assert list(decode_records(data)) == [(0, [b"k" * 255, b"v" * 255]),
                                          (len(old), [b"n" * 255])]
    assert whole_length(data) == len(data)
    assert whole_length(data[:-1]) == len(old)


def test_multi_frame_records_in_a_row():
    first, second = [b"key", b"{}", b"a" * 300], [b"k2", b"", b"x"]
    data = encode_record(first) + encode_record(second)
    assert data[0] == 0x01 and data[5] == 0x01  # more frames follow
    assert list(decode_records(data)) == [(0, first), (len(encode_record(first)), second)]


@pytest.mark.parametrize("cut", [1, 3, 9, 20])
def test_torn_tail_is_not_a_record(cut):
    data = encode_record([b"whole"]) + encode_record([b"k", b"m", b"p" * 300])
    torn = data[:len(data) - cut]
    assert whole_length(torn) == len(encode_record([b"whole"]))


def test_bad_flag_is_an_error_with_its_offset():
    data = encode_record([b"ok"]) + b"\x80\x01x"
    with pytest.raises(ArchiveFormatError) as raised:
        list(decode_records(data))
    assert raised.value.offset == 4


def message(n: int, topic: str = "orders", size: int = 10) -> ArchivedMessage:
    return ArchivedMessage(b"00000000-%016x" % n, b"m%d" % n, topic, 1, 2, 3, 1, "00000000",
                           (b"x" * size,))


def test_archived_message_round_trip():
    original = message(7)
    (record,) = walk(encode_record(original.frames()))
    assert isinstance(record, MessageRecord) and record.message == original
    (damaged,) = walk(encode_record([b"key", b"not json"]))
    assert isinstance(damaged, Damaged) and damaged.reason.startswith("record metadata is not JSON")


@pytest.mark.parametrize("bad", ["", ".hidden", "a/b", "x" * 256, "spa ce", "é"])
def test_bad_topic_names(bad):
    with pytest.raises(ValueError):
        validate_topic(bad)


def test_rolling_keeps_offsets_continuous(tmp_path):
    log = TopicLog(tmp_path / "t", segment_size=100, flush_messages=1000, flush_interval_s=1)
    log.open(now=0)
    offsets = [log.append(message(i).frames(), now=0) for i in range(10)]
    sizes = [len(encode_record(message(i).frames())) for i in range(10)]
    assert offsets == [sum(sizes[:i]) for i in range(10)]
    segments = list_segments(tmp_path / "t")
    assert len(segments) > 2
    for previous, following in zip(segments, segments[1:], strict=False):
        assert previous.start + previous.size == following.start  # no gap, no straddle
        assert previous.path.name == f"{previous.start:020d}.dat"
    log.close(now=0)
    whole = b"".join(segment.path.read_bytes() for segment in segments)
    assert [offset for offset, _ in decode_records(whole)] == offsets


def test_fsync_by_count_and_by_interval(tmp_path):
    log = TopicLog(tmp_path / "t", segment_size=10**6, flush_messages=3, flush_interval_s=1.0)
    log.open(now=100.0)
    log.append([b"a"], now=100.0)
    log.append([b"b"], now=100.0)
    assert log._unsynced == 2
    log.append([b"c"], now=100.0)
    assert log._unsynced == 0  # the third message reached flush_messages
    log.append([b"d"], now=100.2)
    log.tick(now=100.9)
    assert log._unsynced == 1  # not yet a second since the last fsync
    log.tick(now=101.3)
    assert log._unsynced == 0


def test_retention_deletes_old_whole_segments_never_the_active(tmp_path):
    log = TopicLog(tmp_path / "t", segment_size=50, flush_messages=1, flush_interval_s=1)
    log.open(now=0)
    for i in range(6):
        log.append(message(i).frames(), now=0)
    segments = list_segments(tmp_path / "t")
    for index, segment in enumerate(segments):
        os.utime(segment.path, (1000 + index, 1000 + index))
    assert log.apply_retention(now=1000 + 3600, retain_s=3600) == 0
    deleted = log.apply_retention(now=1002 + 3600.5, retain_s=3600)
    assert deleted == 3  # the segments last written at 1000, 1001 and 1002
    assert log.apply_retention(now=10**9, retain_s=1) == len(segments) - 4
    assert [s.path.exists() for s in segments][-1] and len(log.segments) == 1
    assert log.start_offset == segments[-1].start


def test_torn_tail_recovery_then_clean_appends(tmp_path):
    archive = Archive(tmp_path, segment_size=10**6)
    archive.open(now=0)
    offsets = [archive.append(message(i), now=0) for i in range(3)]
    archive.close(now=0)
    (segment,) = list_segments(tmp_path / "orders")
    full = segment.path.read_bytes()
    segment.path.write_bytes(full[:-5])  # a crash in the middle of the last record

    reopened = Archive(tmp_path, segment_size=10**6)
    with structlog.testing.capture_logs() as logs:
        reopened.open(now=0)
    assert segment.size == offsets[2]  # the torn record cut
    torn = len(full) - 5 - offsets[2]
    assert [log for log in logs if log["event"] == "archive_tail_cut"] == [{  # said once
        "event": "archive_tail_cut", "log_level": "warning", "component": "pzq.archive",
        "topic": "orders",
        "segment": segment.path.name, "offset": offsets[2], "bytes": torn}]
    assert reopened.append(message(9), now=0) == offsets[2]
    reopened.close(now=0)
    records = [item.message for item in walk(segment.path.read_bytes())
               if isinstance(item, MessageRecord)]
    assert [r.msg_id for r in records] == [b"m0", b"m1", b"m9"]


def test_read_whole_records_within_max_bytes(tmp_path):
    log = TopicLog(tmp_path / "t", segment_size=10**6, flush_messages=1000, flush_interval_s=1)
    log.open(now=0)
    offsets = [log.append(message(i, size=100).frames(), now=0) for i in range(5)]
    record = offsets[1] - offsets[0]
    assert len(log.read(offsets[1], record * 2 + 10)) == record * 2
    assert len(log.read(offsets[1], 1)) == record  # at least one whole record
    assert log.read(log.end_offset, 100) == b""
    with pytest.raises(ValueError):
        log.read(log.end_offset + 1, 100)


def test_pzq_archive_topics_dump_and_verify(tmp_path, capsys):
    from pzq.archive import tool
    archive = Archive(tmp_path, segment_size=200)
    archive.open(now=0)
    offsets = [archive.append(message(i, topic="t"), now=0) for i in range(5)]
    archive.close(now=0)
    assert tool.main(["topics", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("t: byte offsets 0..") and "00000000000000000000.dat" in listing
    assert tool.main(["dump", str(tmp_path), "t", "--from", str(offsets[2]), "--count", "2"]) == 0
    dumped = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in dumped] == [str(offsets[2]), str(offsets[3])]
    segment = list_segments(tmp_path / "t")[0]
    assert tool.main(["verify", str(segment.path)]) == 0
    data = segment.path.read_bytes()
    bad = offsets[1]  # the flag byte of the second record
    segment.path.write_bytes(data[:bad] + b"\x80" + data[bad + 1:])
    assert tool.main(["verify", str(segment.path)]) == 1
    assert f"bad flag byte 0x80 at byte {bad}" in capsys.readouterr().out
    segment.path.write_bytes(data[:-4])
    assert tool.main(["verify", str(segment.path)]) == 1
    assert "torn record" in capsys.readouterr().out
