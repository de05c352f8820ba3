"""A group of frames as pzq stores and carries them: a count, then each frame after
its length (both 4 bytes, big-endian). A stored record (pzq.store.record) holds a
message's headers and parts as two such groups, and produce and consume batches
carry them in the same layout, so a record's groups go on the wire as they are.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from pzq.errors import DecodeError

LENGTH = struct.Struct(">I")


def group_chunks(items: Sequence[bytes]) -> list[bytes]:
    """The group's bytes, as chunks to join with whatever surrounds it."""
    pack = LENGTH.pack
    chunks = [pack(len(items))]
    for item in items:
        chunks += (pack(len(item)), item)
    return chunks


def read_group(data: bytes, at: int) -> tuple[tuple[bytes, ...], int]:
    """The group starting at ``at``, and where it ends; DecodeError if it runs past
    the end of ``data``."""
    unpack = LENGTH.unpack_from
    try:
        (count,) = unpack(data, at)
        at += 4
        items = []
        for _ in range(count):
            (length,) = unpack(data, at)
            at += 4 + length
            items.append(data[at - length:at])
    except struct.error:
        raise DecodeError("a frame group is truncated") from None
    if at > len(data):
        raise DecodeError("a frame group is truncated")
    return tuple(items), at
