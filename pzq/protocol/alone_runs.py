"""Runs of producer messages sent alone (the original frames, one ZeroMQ message
each) that share one shape: as many frames, the same header frames and the empty
frame at the same place. What a run's first message says of its headers holds for
every one of them, so a run is checked once and its records are made in C over its
messages (``map`` and ``zip``), a few calls whatever its length.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice, repeat, takewhile
from operator import and_, eq, getitem, itemgetter
from typing import cast

from pzq.protocol.frame_groups import LENGTH, group_chunks

Raw = list[bytes]  # a message as the ROUTER received it: routing id, msg id, the rest
SLICE_OF = cast(Callable[[Raw, slice], Raw], getitem)  # raw[a slice of it]
ROUTING_ID = itemgetter(0)
MSG_ID = itemgetter(1)


def run_length(raws: list[Raw], start: int, headers: tuple[bytes, ...]) -> int:
    """How many messages from ``start`` on (the first included, whose headers are
    ``headers`` and whose empty frame follows them) have its shape, in C: stops at
    the first that differs."""
    size = len(raws[start])
    head = slice(2, 3 + len(headers))  # the header frames and the empty one
    shape = [*headers, b""]
    rest = islice(raws, start + 1, None)
    others = islice(raws, start + 1, None)
    alike = map(and_, map(eq, map(len, rest), repeat(size)),
                map(eq, map(SLICE_OF, others, repeat(head)), repeat(shape)))
    return 1 + len(list(takewhile(bool, alike)))


def body_sizes(run: list[Raw], at: int) -> list[int]:
    """Each message's body size, its parts from frame ``at`` on (every message of a
    run has as many), one pass in C for each part."""
    parts = len(run[0]) - at
    sizes = list(map(len, map(itemgetter(at), run)))
    for index in range(at + 1, at + parts):
        sizes = list(map(int.__add__, sizes, map(len, map(itemgetter(index), run))))
    return sizes


def records(run: list[Raw], at: int, headers: tuple[bytes, ...], fixed: bytes) -> list[bytes]:
    """The stored record of each message of a run, its parts from frame ``at`` on,
    after the record's ``fixed`` fields (pzq.store.record.fixed): what record.encode
    makes of each, made column by column in C."""
    pack = LENGTH.pack
    msg_ids = list(map(MSG_ID, run))
    parts = len(run[0]) - at
    head = b"".join([*group_chunks(headers), pack(parts)])  # the same for all of them
    columns: list[object] = [repeat(fixed), map(pack, map(len, msg_ids)),
                             msg_ids, repeat(head)]
    for index in range(at, at + parts):
        frames = list(map(itemgetter(index), run))
        columns += (map(pack, map(len, frames)), frames)
    return list(map(b"".join, zip(*columns, strict=False)))
