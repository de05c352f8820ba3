"""Records of a stretch of segment bytes by their frames alone, gathered column-wise.

The bulk readers' fast path (the Spark executors): one tight loop over the frames,
each record's key, metadata and parts kept as byte strings in lists, nothing else
built per record. It stops *before* the first record whose frames do not parse (a
bad flag byte, a frame running past the bytes at hand, a pzq record with no
metadata frame): that record and everything after it is for the exact walk of
pzq.archive.format.records and pzq.archive.format.raw, which applies the damage rule. Metadata
is not parsed here; whoever uses a run checks it (pzq.spark_arrow).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MORE, LONG, KNOWN_FLAGS = 0x01, 0x02, 0x03


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


def frame_run(data: bytes, position: int, stop: int, max_records: int, max_bytes: int,
              raw: bool) -> FrameRun:
    """The records of ``data`` from ``position`` (a record start) that start before
    ``stop``: at most ``max_records``, and none starting ``max_bytes`` or more past
    ``position`` (so one run's bytes stay well under Arrow's 2 GiB per array)."""
    run = FrameRun(end=position)
    try:
        run.broken = not _walk(data, position, min(stop, position + max_bytes), max_records,
                               raw, run)
    except IndexError:  # a frame header cut by the end of the bytes
        run.broken = True
    del run.parts[sum(run.part_counts):]  # those of a record cut short
    return run


def _walk(data: bytes, position: int, limit: int, max_records: int, raw: bool,
          run: FrameRun) -> bool:
    """Fill ``run``; False at a record whose frames do not parse. One loop, locals
    only: this is the per-record cost of a bulk read."""
    size = len(data)
    starts, keys, metadata = run.starts, run.keys, run.metadata
    parts, counts = run.parts, run.part_counts
    first_part = 0 if raw else 2  # a pzq record's first two frames: key, metadata
    key = meta = b""
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
                parts.append(data[payload:at])
            elif frame == 0:
                if not more:  # a pzq record needs its metadata frame
                    return False
                key = data[payload:at]
            else:
                meta = data[payload:at]
            frame += 1
        if not raw:
            keys.append(key)
            metadata.append(meta)
        counts.append(frame - first_part)
        starts.append(position)
        position = run.end = at
    return True
