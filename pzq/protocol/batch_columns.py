"""A consume BATCH's entries read as columns (pzq.protocol.consume has the layout), for
the consumer: the keys, headers and parts of all its deliveries in a fixed number of
calls, the work over the entries done by ``struct.iter_unpack`` in C.

Deliveries as most consumers get them (no headers, one part) come as entries of one
shape when every key and every part is as long: one struct reads them all, and the
columns are checked whole (every row of that shape), so the result is what reading
entry by entry gives. Any other batch is read entry by entry (``decode_batch``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pzq.protocol.consume import decode_batch

Headers = tuple[bytes, ...]
Parts = tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """A BATCH's deliveries, column by column (``headers`` None: none has any)."""

    sent_us: int
    ack_timeout_us: int
    keys: tuple[bytes, ...]
    headers: tuple[Headers, ...] | None
    parts: tuple[Parts, ...]


def decode_batch_columns(frames: list[bytes]) -> BatchColumns:
    """A BATCH (``frames`` as the DEALER receives them); DecodeError as decode_batch."""
    if len(frames) == 6 and frames[3].isdigit() and frames[4].isdigit():
        columns = _uniform(frames[5])
        if columns is not None:
            keys, parts = columns
            return BatchColumns(int(frames[3]), int(frames[4]), keys, None, parts)
    batch = decode_batch(frames)
    keys = tuple([key for key, _, _ in batch.entries])
    headers = tuple([entry_headers for _, entry_headers, _ in batch.entries])
    return BatchColumns(batch.sent_us, batch.ack_timeout_us, keys,
                        headers if any(headers) else None,
                        tuple([parts for _, _, parts in batch.entries]))


def _uniform(data: bytes) -> tuple[tuple[bytes, ...], tuple[Parts, ...]] | None:
    """The keys and parts of entries that all have one shape (key of the first's
    length, no headers, one part of the first's length); None for any other."""
    if len(data) < 13:
        return None
    key_size = data[0]
    head = 1 + key_size
    try:
        header_count, part_count, part_size = struct.unpack_from(">III", data, head)
    except struct.error:
        return None
    size = head + 12 + part_size
    if header_count or part_count != 1 or len(data) % size:
        return None
    shape = f">B{key_size}sIII{part_size}s"
    key_sizes, keys, header_counts, part_counts, part_sizes, bodies = zip(
        *struct.iter_unpack(shape, data), strict=True)
    count = len(keys)
    if key_sizes.count(key_size) != count or header_counts.count(0) != count \
            or part_counts.count(1) != count or part_sizes.count(part_size) != count:
        return None
    return keys, tuple(zip(bodies))

