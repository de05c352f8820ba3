"""A produce batch's entries (pzq.protocol.produce_batches) read as runs: members in
a row that share one header group and are not refused, each kept as the bytes it
came in. The node stores a run with a fixed number of Python calls (the records,
keys and ACK made in C over its members), so a batch of n costs a few calls a run.

Members mostly repeat one header group (``TOPIC:orders``): the group is read and
checked once, and a member whose group is the same bytes as the one before it is
matched with one comparison. A batch whose entries all have one shape (msg ids of
one length, one header group, one part of one size: a producer's batch of
equal-sized messages) is checked and cut up in C, without a step per entry.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from pzq.bulk import CUT_AT_ONCE, cut
from pzq.errors import DecodeError, ProduceRefused
from pzq.protocol.frame_groups import LENGTH, read_group
from pzq.protocol.frames import MSG_ID_MAX, check_producer_headers, msg_id_refusal

_GROUPS = 256  # header groups remembered (a batch's refusals are checked once each)


@dataclass(slots=True)
class MemberRun:
    """Members in a row with one header group, none refused."""

    headers: tuple[bytes, ...]
    first: int  # the batch index of its first member
    entries: Sequence[bytes]  # each one's entry: the record's bytes after its fixed fields
    body_sizes: list[int]
    size: int = 0  # every entry's size when they are all one (0: they are not)

    def tokens(self, batch_id: bytes) -> list[bytes]:
        """Each member's token (produce_batches.member_token), made in C."""
        numbers = map(b"%d".__mod__, range(self.first, self.first + len(self.entries)))
        return list(map((batch_id + b"\x00").__add__, numbers))


Member = MemberRun | ProduceRefused


def member_token(batch_id: bytes, index: int) -> bytes:
    """How the node names the ``index``-th message of a batch until it is answered."""
    return b"%s\x00%d" % (batch_id, index)


def read_runs(routing_id: bytes, batch_id: bytes, data: bytes, count: int,
              max_body_size: int) -> list[Member]:
    """The ``count`` entries of ``data`` in runs, or why each refused one is; DecodeError
    when the entries cannot be read or are not ``count``."""
    try:
        uniform = _uniform(routing_id, batch_id, data, count, max_body_size)
        if uniform is not None:  # (``count`` entries of its size: nothing to count)
            return uniform
        found = _walk(routing_id, batch_id, data, max_body_size)
    except struct.error:
        raise DecodeError("a batch entry is truncated") from None
    if sum(len(member.entries) if isinstance(member, MemberRun) else 1
           for member in found) != count:
        raise DecodeError("the batch's entries are not as many as it says")
    return found


def _walk(routing_id: bytes, batch_id: bytes, data: bytes,
          max_body_size: int) -> list[Member]:
    """Entry by entry. The groups are walked here, not by a helper of
    pzq.protocol.frame_groups: its calls cost about 0.5 µs a message."""
    unpack = LENGTH.unpack_from
    found: list[Member] = []
    at, end, index = 0, len(data), 0
    group, group_size = b"", 0  # the last header group's bytes (0: none yet)
    headers: tuple[bytes, ...] = ()
    refusal = ""
    run: MemberRun | None = None
    entries: list[bytes] = []  # the run's
    while at < end:
        start = at
        (id_size,) = unpack(data, at)
        at += 4 + id_size
        if group_size and data.startswith(group, at):
            at += group_size  # the same header group as the entry before
        else:
            group_at = at
            (headers_count,) = unpack(data, at)
            at += 4
            for _ in range(headers_count):
                (length,) = unpack(data, at)
                at += 4 + length
            group, group_size = data[group_at:at], at - group_at
            headers, refusal = _header_group(group)
        (parts,) = unpack(data, at)
        at += 4
        body_size = 0
        for _ in range(parts):
            (length,) = unpack(data, at)
            at += 4 + length
            body_size += length
        if at > end:
            raise DecodeError("a batch entry runs past the end of the batch")
        refused = _refusal(parts, body_size, max_body_size, id_size) or refusal
        if refused:
            found.append(ProduceRefused(refused, routing_id, member_token(batch_id, index)))
            run = None
        else:
            if run is None or run.headers is not headers:
                entries = []
                run = MemberRun(headers, index, entries, [])
                found.append(run)
            entries.append(data[start:at])
            run.body_sizes.append(body_size)
        index += 1
    return found


@dataclass(frozen=True, slots=True)
class _Shape:
    """What every entry of a batch of one shape has (pzq.protocol.batch_runs._uniform):
    the fields checked in each, its size and what its header group says."""

    fields: tuple[int, bytes, int, int]  # msg id length, header group, parts (1), body length
    size: int  # an entry's bytes
    headers: tuple[bytes, ...]
    refusal: str  # why each is refused ("": it is not)
    check: struct.Struct | None  # every entry's fields at once (None: over CUT_AT_ONCE)
    expected: tuple[int | bytes, ...]  # what ``check`` finds in a batch of this shape


# Shapes by a batch's size, count and limit: a producer's next batch of equal messages
# is mostly the last one's shape, checked with one unpack (at most _GROUPS kept)
_SHAPES: dict[tuple[int, int, int], _Shape] = {}


def _uniform(routing_id: bytes, batch_id: bytes, data: bytes, count: int,
             max_body_size: int) -> list[Member] | None:
    """Every entry cut and checked in C when all have the first one's shape (its msg
    id's length, its header group, one part of its size); None when they do not. The
    shape of the batch before of this size and count is tried first: a batch of it
    costs one dict look-up, one unpack and one compare before its entries are cut."""
    key = (len(data), count, max_body_size)
    shape = _SHAPES.get(key)
    if shape is None or not (shape.check.unpack(data) == shape.expected  # (_same_shape's)
                             if shape.check is not None else _same_shape(data, shape, count)):
        shape = _shape_of(data, count, max_body_size)
        if shape is None or not _same_shape(data, shape, count):
            return None
        if len(_SHAPES) >= _GROUPS:
            _SHAPES.clear()
        _SHAPES[key] = shape
    if shape.refusal:
        return [ProduceRefused(shape.refusal, routing_id, member_token(batch_id, index))
                for index in range(count)]
    body_size = shape.fields[3]
    return [MemberRun(shape.headers, 0, cut(data, shape.size, count), [body_size] * count,
                      shape.size)]


def _shape_of(data: bytes, count: int, max_body_size: int) -> _Shape | None:
    """The first entry's shape, when ``count`` entries of its size make ``data``."""
    (id_size,) = LENGTH.unpack_from(data, 0)
    group_at = 4 + id_size
    group_end = read_group(data, group_at)[1]
    if len(data) < group_end + 8:
        return None
    parts, body_size = _TWO.unpack_from(data, group_end)
    size = group_end + 8 + body_size
    if parts != 1 or size * count != len(data):
        return None
    group = data[group_at:group_end]
    headers, refusal = _header_group(group)
    fields = (id_size, group, 1, body_size)
    at_once = count <= CUT_AT_ONCE
    return _Shape(fields, size, headers,
                  _refusal(parts, body_size, max_body_size, id_size) or refusal,
                  _shape(id_size, len(group), body_size, count) if at_once else None,
                  fields * count if at_once else ())


_TWO = struct.Struct(">II")  # a part count and the first part's length


def _same_shape(data: bytes, shape: _Shape, count: int) -> bool:
    """Whether every entry's fixed fields (its msg id's length, its header group, one
    part and that part's length) are ``shape``'s: read by struct unpacks of up to
    CUT_AT_ONCE entries each, one tuple for them all compared with the fields repeated
    (no tuple an entry)."""
    if shape.check is not None:
        return shape.check.unpack(data) == shape.expected
    id_size, group, _, body_size = shape.fields
    whole = count - count % CUT_AT_ONCE
    expected = shape.fields * CUT_AT_ONCE
    fields = _shape(id_size, len(group), body_size, CUT_AT_ONCE)
    if any(map(expected.__ne__, fields.iter_unpack(memoryview(data)[:whole * shape.size]))):
        return False
    rest = count - whole
    return not rest or _shape(id_size, len(group), body_size, rest).unpack_from(
        data, whole * shape.size) == shape.fields * rest


@lru_cache(maxsize=64)
def _shape(id_size: int, group_size: int, body_size: int, count: int) -> struct.Struct:
    """``count`` entries' fixed fields, their msg ids and bodies skipped."""
    return struct.Struct(">" + f"I{id_size}x{group_size}sII{body_size}x" * count)


def _refusal(parts: int, body_size: int, max_body_size: int, id_size: int) -> str:
    if not parts:
        return "message has no body part"
    if body_size > max_body_size:
        return (f"message body of {body_size} bytes exceeds the limit of "
                f"{max_body_size} bytes")
    if id_size > MSG_ID_MAX:
        return msg_id_refusal(id_size)
    return ""


@lru_cache(maxsize=_GROUPS)
def _header_group(group: bytes) -> tuple[tuple[bytes, ...], str]:
    """A header group's headers, and why it is refused ("": it is not). Remembered:
    members of one group share its tuple."""
    headers = read_group(group, 0)[0]
    try:
        check_producer_headers(headers, b"", b"")
    except ProduceRefused as refused:
        return headers, refused.reason
    return headers, ""
