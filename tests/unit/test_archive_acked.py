"""The archive's writes of a whole ACK: the same records, byte for byte, as the same
messages archived one by one (real archives in files), and the metadata as
``json.dumps`` writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.files import read_topic
from pzq.archive.tier.tier import ArchiveSettings, ArchiveTier
from pzq.archive.tier.topiclog import list_segments
from pzq.delivery.inflight import InFlight
from pzq.protocol.message_keys import message_key
from pzq.store import record

pytestmark = pytest.mark.timeout(60)

ORIGIN = b"0123abcd"
ACKED_US = 1_700_000_123_456_789
# (headers, groups) of the messages in turn: topics, a name the archive cannot take
# (the default topic), other headers, groups named or not, JSON's special characters
KINDS = [((b"TOPIC:orders",), ()),
         ((b"TOPIC:audit", b"TAG:\xe9\"\\x"), ("g1",)),
         ((b"topic:orders", b"KEY:k", b"DELAY:30000"), ("b", "a\u00e9")),
         ((), ()),
         ((b"TOPIC:../no",), ("default", "g2"))]


def tier_at(directory: Path, segment_size: int) -> ArchiveTier:
    tier = ArchiveTier(ArchiveSettings(directory, segment_size, 1 << 30, 3_600_000, 168,
                                       "default", hard_sync=False))
    tier.open(now=0.0)
    return tier


def messages(count: int) -> list[tuple[InFlight, tuple[str, ...]]]:
    made = []
    for seq in range(1, count + 1):
        headers, groups = KINDS[seq % len(KINDS)]
        parts = (b"body %d" % seq, b"x" * (seq * 7 % 400))  # short and long frames
        msg_id = bytes([seq % 256, 0x22, 0x5c, 0xff])
        value = record.encode(msg_id, headers, parts, 1_600_000_000_000_000 + seq)
        made.append((InFlight(seq, value, 0, 0, seq % 3 + 1, 1_650_000_000_000_000 + seq),
                     groups))
    return made


def archived_bytes(directory: Path) -> dict[str, list[bytes]]:
    return {topic.name: [segment.path.read_bytes() for segment in list_segments(topic)]
            for topic in sorted(directory.iterdir())}


@pytest.mark.parametrize("segment_size", [1 << 20, 900])  # one segment, or many rolls
def test_an_ack_of_many_archives_the_bytes_one_by_one_writes_make(tmp_path, segment_size):
    made = messages(60)
    bulk = tier_at(tmp_path / "bulk", segment_size)
    unwritten, error = bulk.append_acked(ORIGIN, [entry for entry, _ in made],
                                         [groups for _, groups in made], ACKED_US)
    assert (unwritten, error, bulk.archived) == ([], None, 60)
    bulk.close(now=1.0)
    each = tier_at(tmp_path / "each", segment_size)
    for entry, groups in made:
        each.append(message_key(ORIGIN, entry.seq), entry.value, entry.first_delivered_us,
                    entry.deliveries, ACKED_US, ORIGIN.decode(), groups=groups)
    each.close(now=1.0)

    written = archived_bytes(tmp_path / "bulk")
    assert sorted(written) == ["audit", "default", "orders"]
    assert written == archived_bytes(tmp_path / "each")
    assert (len(written["orders"]) > 1) == (segment_size < 1000)
    read = [message for topic in written for _, message in read_topic(tmp_path / "bulk", topic)]
    assert sorted(message.key for message in read) == sorted(
        message_key(ORIGIN, entry.seq) for entry, _ in made)
    orders = [message.parts[0] for _, message in read_topic(tmp_path / "bulk", "orders")]
    assert orders == [b"body %d" % seq for seq in range(1, 61) if seq % len(KINDS) in (0, 2)]


@pytest.mark.parametrize("groups, headers", [
    ((), ()), (("g1",), ()), ((), (b"TAG:a",)),
    (("a\"b", "\u00e9\\"), (b"KEY:\x00\x1f\x7f\x80\xff", b"DEDUP-ID:\"\\/"))])
def test_the_metadata_is_what_json_dumps_writes(groups, headers):
    message = ArchivedMessage(
        key=b"0123abcd-0000000000000001", msg_id=bytes(range(256)), topic="t.o-p_ic",
        stored_us=1, first_delivered_us=0, acked_us=2**62, deliveries=7, origin="0123abcd",
        parts=(b"p",), outcome="dead_letter", groups=groups, headers=headers)
    metadata: dict[str, object] = {
        "topic": message.topic, "msg_id": message.msg_id.decode("latin-1"),
        "stored_us": 1, "first_delivered_us": 0, "acked_us": 2**62, "deliveries": 7,
        "origin": "0123abcd", "outcome": "dead_letter"}
    if groups:
        metadata["groups"] = list(groups)
    if headers:
        metadata["headers"] = [header.decode("latin-1") for header in headers]
    assert message.frames()[1] == json.dumps(metadata, separators=(",", ":")).encode()
