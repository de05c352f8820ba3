"""A message archived and still stored when the node starts (killed between an ACK's
archive write and its store delete) is not archived again, once; a message under the
same key stored at another time (a store restored under seqs used before) is."""

from __future__ import annotations

from pathlib import Path

import pytest

from pzq.archive.format.files import read_topic
from pzq.archive.tier.archived_at_start import FIRST_TAIL_BYTES
from pzq.archive.tier.tier import ArchiveSettings, ArchiveTier
from pzq.delivery.inflight import InFlight
from pzq.protocol.message_keys import message_key
from pzq.store import record

pytestmark = pytest.mark.timeout(60)
ORIGIN = b"0123abcd"


def tier_at(directory: Path) -> ArchiveTier:
    return ArchiveTier(ArchiveSettings(directory, 1 << 20, 1 << 30, 3_600_000, 168,
                                       "default", hard_sync=False))


def entry(seq: int, stored_us: int) -> InFlight:
    value = record.encode(b"id-%d" % seq, (b"TOPIC:orders",), (b"body %d" % seq,), stored_us)
    return InFlight(seq, value, 0, 0, 1, stored_us + 5)


def test_only_what_the_store_still_holds_as_archived_is_skipped_and_only_once(tmp_path):
    tier = tier_at(tmp_path)
    tier.open(0.0)
    first = [entry(seq, 1_000 + seq) for seq in range(1, 5)]
    assert tier.append_acked(ORIGIN, first, [()] * 4, 2_000) == ([], None)
    tier.close(0.0)
    # the log's end (3 and 4) is still stored as archived; 2 under another time (a
    # store restored under seqs used before) ends it, and 1 is not stored at all
    still = {message_key(ORIGIN, 4): 1_004, message_key(ORIGIN, 3): 1_003,
             message_key(ORIGIN, 2): 9_999}
    tier = tier_at(tmp_path)
    tier.open(0.0, still.get)
    assert len(tier.archived_at_start) == 2
    again = [entry(2, 9_999), entry(3, 1_003)]
    assert tier.append_acked(ORIGIN, again, [(), ()], 3_000) == ([], None)
    tier.append(message_key(ORIGIN, 4), entry(4, 1_004).value, 1_009, 1, 4_000, "0123abcd")
    tier.append(message_key(ORIGIN, 3), entry(3, 1_003).value, 1_008, 2, 5_000, "0123abcd")
    tier.close(0.0)
    bodies = [(m.parts[0], m.stored_us) for _, m in read_topic(tmp_path, "orders")]
    assert bodies == [(b"body 1", 1_001), (b"body 2", 1_002), (b"body 3", 1_003),
                      (b"body 4", 1_004), (b"body 2", 9_999), (b"body 3", 1_003)]


def test_the_log_is_read_from_its_end_while_its_records_are_still_stored(tmp_path):
    """A tail grows while all its records are held (here past FIRST_TAIL_BYTES), and
    stops at the first that is not: a record before it is not looked at."""
    tier = tier_at(tmp_path)
    tier.open(0.0)
    count = 3 * FIRST_TAIL_BYTES // 100  # some three first tails of these records
    first = [entry(seq, 1_000 + seq) for seq in range(1, count + 1)]
    assert tier.append_acked(ORIGIN, first, [()] * count, 2_000) == ([], None)
    tier.close(0.0)
    asked: list[bytes] = []

    def stored_at(key: bytes) -> int | None:
        asked.append(key)
        seq = int(key.split(b"-")[1], 16)
        return 1_000 + seq if seq != 10 and seq > 5 else None  # 10 ends the tail

    tier = tier_at(tmp_path)
    tier.open(0.0, stored_at)
    assert len(tier.archived_at_start) == count - 10
    assert message_key(ORIGIN, 9) not in asked and message_key(ORIGIN, 10) in asked
