"""The one record walker: the records of segment bytes by their frames, column-wise.

Every read of the archive walks records here, in one tight loop over the frames
that keeps each record's key, metadata and parts as byte strings in lists and
builds nothing else per record. The bulk readers (the Spark executors,
pzq.spark.arrow) take its runs as they are; the exact walk under the damage rule
(pzq.archive.format.records) builds its records, spans and frame lists from them.
A run stops *before* the first record whose frames do not parse (a bad flag byte,
a frame running past the bytes at hand, a pzq record with no metadata frame): that
record is read frame by frame by the exact walk, which says what is wrong with it.
Metadata is not parsed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pzq.archive.format.codec import LONG, MORE, Buffer

KNOWN_FLAGS = MORE | LONG


@dataclass
class FrameRun:
    """Whole records by their frames, from ``starts[0]`` to ``end``; positions are
    in the bytes walked. A raw run (ZPER producers' records) has no keys and no
    metadata: every frame is a part."""

    starts: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    metadata: list[bytes] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)
    part_counts: list[int] = field(default_factory=list)
    end: int = 0  # where the record after the run starts
    broken: bool = False  # the run stopped at a record whose frames do not parse


def frame_run(data: Buffer, position: int, stop: int, max_records: int, max_bytes: int,
              raw: bool, size: int | None = None, keep: bool = True) -> FrameRun:
    """The records of ``data`` from ``position`` (a record start) that start before
    ``stop`` and end by ``size`` (default: the end of ``data``): at most
    ``max_records``, and none starting ``max_bytes`` or more past ``position`` (so
    one run's bytes stay well under Arrow's 2 GiB per array). Without ``keep`` the
    parts are not copied: only where records start is wanted."""
    run = FrameRun(end=position)
    try:
        run.broken = not _walk(data, position, min(stop, position + max_bytes), max_records,
                               raw, run, len(data) if size is None else size, keep)
    except IndexError:  # a frame header cut by the end of the bytes
        run.broken = True
    del run.parts[sum(run.part_counts):]  # those of a record cut short
    return run


def _walk(data: Buffer, position: int, limit: int, max_records: int, raw: bool,
          run: FrameRun, size: int, keep: bool) -> bool:
    """Fill ``run``; False at a record whose frames do not parse. One loop, locals
    only: this is the per-record cost of every read."""
    starts, keys, metadata = run.starts, run.keys, run.metadata
    parts, counts = run.parts, run.part_counts
    first_part = 0 if raw else 2  # a pzq record's first two frames: key, metadata
    head = [b"", b""]  # a pzq record's key and metadata
    while position < limit and len(starts) < max_records:
        at = position
        frame = 0
        more = 1
        while more:
            flag = data[at]
            if flag & ~KNOWN_FLAGS:
                return False
            more = flag & MORE
            if flag & LONG:
                payload = at + 9  # a cut length reads short: the frame still runs past
                at = payload + int.from_bytes(data[at + 1:payload], "big")
            else:
                payload = at + 2
                at = payload + data[at + 1]
            if at > size:
                return False
            if frame >= first_part:
                if keep:
                    parts.append(data[payload:at])
            else:
                head[frame] = data[payload:at]
            frame += 1
        if frame < first_part:  # a pzq record needs its metadata frame
            return False
        if not raw:
            keys.append(head[0])
            metadata.append(head[1])
        counts.append(frame - first_part)
        starts.append(position)
        position = run.end = at
    return True
