"""Producer header frames that pzq reads itself: ``TOPIC:name``, ``TAG:value``,
``DEDUP-ID:value`` and ``KEY:value``, and the partition a key belongs to.

One parser for every part that needs a message's topic (intake, the group logs, the
copies of a cluster, the archive), so a message is stored, delivered and archived
under one topic. Header names match in any case; a repeated header's last value
counts. A topic name is also a directory of the archive, hence its rule.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Container, Iterable

TOPIC_HEADER = b"TOPIC:"
TAG_HEADER = b"TAG:"
DEDUP_HEADER = b"DEDUP-ID:"
KEY_HEADER = b"KEY:"  # a partitioned topic's messages of one key stay in one partition
DEDUP_ID_MAX = 255  # bytes
TAG_MAX = 255  # bytes: a tag is part of store keys (its topic's log), as a topic name is
TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")


def validate_topic(name: str) -> str:
    """A topic is a directory name: letters, digits, '.', '_', '-', not starting with '.'."""
    if not TOPIC_PATTERN.fullmatch(name):
        raise ValueError(f"topic {name[:40]!r} must be 1-255 of A-Z a-z 0-9 . _ - "
                         "and not start with '.'")
    return name


def topic_and_tag(headers: Iterable[bytes], default_topic: str,
                  known: Container[str] = ()) -> tuple[str, bytes]:
    """The message's topic (ValueError for a name that cannot be one) and its tag.
    ``known``: names already checked (the node's topics), not checked again."""
    topic, tag = default_topic, b""
    for header in headers:
        if header[:6].upper() == TOPIC_HEADER:
            topic = header[6:].decode(errors="replace")
            if topic not in known:
                validate_topic(topic)
        elif header[:4].upper() == TAG_HEADER:
            tag = header[4:]
    return topic, tag


def dedup_id_of(headers: Iterable[bytes]) -> bytes | None:
    """The producer's de-duplication id (None: the message has none); ValueError for
    an empty or overlong one."""
    found = None
    size = len(DEDUP_HEADER)
    for header in headers:
        if header[:size].upper() == DEDUP_HEADER:
            found = header[size:]
    if found is not None and not 0 < len(found) <= DEDUP_ID_MAX:
        raise ValueError(f"DEDUP-ID must be 1 to {DEDUP_ID_MAX} bytes, got {len(found)}")
    return found


def key_of(headers: Iterable[bytes]) -> bytes | None:
    """The message's partition key (None: it has none)."""
    found = None
    for header in headers:
        if header[:4].upper() == KEY_HEADER:
            found = header[4:]
    return found


def partition_of(key: bytes, partitions: int) -> int:
    """A key's partition among ``partitions``: the CRC-32 (IEEE, as zlib computes it)
    of its bytes, so that every node and every client computes the same."""
    return zlib.crc32(key) % partitions
