"""A consume BATCH's entries read as columns (pzq.protocol.consume has the layout), for
the consumer: the keys, headers and parts of all its deliveries in a fixed number of
calls, the work over the entries done in C.

Deliveries as most consumers get them (no headers, one part) come as entries of one
shape when every key and every part is as long. Such a batch is checked whole by
strided slices (each of the 13 bytes an entry has besides its key and part, taken
from every entry at once and compared with the first entry's, repeated), and its
keys and parts are cut out by one struct unpack: no object an entry but its key,
its part and the part's tuple. The result is what reading entry by entry gives; any
other batch is read entry by entry (``decode_batch``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import NamedTuple

from pzq.bulk import CUT_AT_ONCE
from pzq.protocol.consume import decode_batch

Headers = tuple[bytes, ...]
Parts = tuple[bytes, ...]

# An entry's fixed fields after its key when it has no headers and one part: header
# count 0 and part count 1 (4 bytes each), then the part's length (4 bytes).
NO_HEADERS_ONE_PART = b"\x00\x00\x00\x00\x00\x00\x00\x01"
FIXED_SIZE = len(NO_HEADERS_ONE_PART) + 4


class BatchColumns(NamedTuple):
    """A BATCH's deliveries, column by column (``headers`` None: none has any;
    ``parts`` None: each has one part, its body in ``bodies``). A tuple: one is made
    a read, without the frozen dataclass's setattr a field."""

    sent_us: int
    ack_timeout_us: int
    keys: Sequence[bytes]
    headers: tuple[Headers, ...] | None
    parts: Sequence[Parts] | None  # None: each delivery's one part is in ``bodies``
    bodies: Sequence[bytes] = ()  # with ``parts`` None, each delivery's one part


def decode_batch_columns(frames: list[bytes]) -> BatchColumns:
    """A BATCH (``frames`` as the DEALER receives them); DecodeError as decode_batch."""
    if len(frames) == 6 and frames[3].isdigit() and frames[4].isdigit():
        columns = _uniform(frames[5])
        if columns is not None:
            keys, bodies = columns
            return BatchColumns(int(frames[3]), int(frames[4]), keys, None, None, bodies)
    batch = decode_batch(frames)
    keys = tuple([key for key, _, _ in batch.entries])
    headers = tuple([entry_headers for _, entry_headers, _ in batch.entries])
    return BatchColumns(batch.sent_us, batch.ack_timeout_us, keys,
                        headers if any(headers) else None,
                        tuple([parts for _, _, parts in batch.entries]))


def _uniform(data: bytes) -> tuple[Sequence[bytes], Sequence[bytes]] | None:
    """The keys and bodies of entries that all have one shape (a key of the first's
    length, no headers, one part of the first's length); None for any other."""
    if len(data) < 1 + FIXED_SIZE:
        return None
    key_size = data[0]
    fixed_at = 1 + key_size
    fixed = data[fixed_at:fixed_at + FIXED_SIZE]
    if not fixed.startswith(NO_HEADERS_ONE_PART) or len(fixed) != FIXED_SIZE:
        return None
    part_size = int.from_bytes(fixed[len(NO_HEADERS_ONE_PART):], "big")
    count, rest = divmod(len(data), fixed_at + FIXED_SIZE + part_size)
    if rest:
        return None
    shape = _shape(key_size, part_size, count)
    if b"".join(map(data.__getitem__, shape.fixed)) != shape.expected:
        return None
    if count <= CUT_AT_ONCE:
        fields: Sequence[bytes] = shape.fields.unpack(data)
    else:
        fields = _fields_of_many(data, key_size, part_size, count)
    return fields[0::2], fields[1::2]


@dataclass(frozen=True, slots=True)
class _Shape:
    """How to check and cut a batch of ``count`` entries of one shape."""

    fixed: tuple[slice, ...]  # each fixed byte's slice over every entry
    expected: bytes  # what those slices hold, joined, when every entry has the shape
    fields: struct.Struct  # each entry's key and part (count <= CUT_AT_ONCE)


@lru_cache(maxsize=64)
def _shape(key_size: int, part_size: int, count: int) -> _Shape:
    size = 1 + key_size + FIXED_SIZE + part_size
    first = (b"%c" % key_size + bytes(key_size) + NO_HEADERS_ONE_PART
             + part_size.to_bytes(4, "big"))  # an entry's bytes, its part left out
    offsets = [0, *range(1 + key_size, 1 + key_size + FIXED_SIZE)]
    return _Shape(tuple(slice(offset, None, size) for offset in offsets),
                  b"".join(first[offset:offset + 1] * count for offset in offsets),
                  _fields(key_size, part_size, min(count, CUT_AT_ONCE)))


@lru_cache(maxsize=64)
def _fields(key_size: int, part_size: int, count: int) -> struct.Struct:
    """``count`` entries' keys and parts, the fixed bytes skipped."""
    return struct.Struct(f"x{key_size}s{FIXED_SIZE}x{part_size}s" * count)


def _fields_of_many(data: bytes, key_size: int, part_size: int, count: int) -> list[bytes]:
    """As ``_shape(...).fields`` of more than CUT_AT_ONCE entries: by struct unpacks of
    CUT_AT_ONCE entries each (a struct's size stays small)."""
    size = 1 + key_size + FIXED_SIZE + part_size
    whole = count - count % CUT_AT_ONCE
    fields = list(chain.from_iterable(_fields(key_size, part_size, CUT_AT_ONCE).iter_unpack(
        memoryview(data)[:whole * size])))
    if whole < count:
        fields += _fields(key_size, part_size, count - whole).unpack_from(data, whole * size)
    return fields
