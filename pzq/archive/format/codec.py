"""The ZPER frame format: ZMTP 2.0 style frames, written to disk as they are.

    flag:1  length:1 (0-255) or length:8 big-endian (flag 0x02)  payload

Flag 0x01 says another frame of the same record follows. A record (one archived
message) is a run of frames whose last one has no 0x01. There is no padding.

Frames of up to 255 bytes are written in the short form, as ZMTP/2.0 puts them on
the wire and as ZPER's clients count offsets (``length > 255 ? 9 : 2`` header
bytes). Readers go by the flag byte, so a 255-byte frame in the long form (what pzq
wrote before) still reads.
"""

from __future__ import annotations

import mmap
import struct

from pzq.errors import ArchiveFormatError, TornRecordError

MORE = 0x01
LONG = 0x02
LONG_LENGTH = struct.Struct(">Q")
SHORT_MAX = 255  # the longest frame written with a one-byte length
Buffer = bytes | mmap.mmap  # what readers walk: slices of either are bytes
# Every short header, by flag (last frame, more follow) and length: built once.
SHORT_HEADERS = [[bytes((flag, length)) for length in range(SHORT_MAX + 1)]
                 for flag in (0, MORE)]


def encode_record(frames: list[bytes]) -> bytes:
    chunks: list[bytes] = []
    encode_into(chunks, frames)
    return b"".join(chunks)


def long_header(more: int, length: int) -> bytes:
    return bytes((more | LONG,)) + LONG_LENGTH.pack(length)


def encode_into(chunks: list[bytes], frames: list[bytes]) -> int:
    """Add a record's headers and payloads to ``chunks`` (joined once for many
    records); returns the record's size."""
    last = len(frames) - 1
    size = 0
    for index, frame in enumerate(frames):
        flag = MORE if index < last else 0
        length = len(frame)
        if length <= SHORT_MAX:
            chunks.append(SHORT_HEADERS[flag][length])
            size += 2 + length
        else:
            chunks.append(long_header(flag, length))
            size += 9 + length
        chunks.append(frame)
    return size


def encode_frames_into(data: bytearray, frames: list[bytes]) -> None:
    """Add one record's headers and payloads to ``data``."""
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        length = len(frame)
        flag = MORE if index < last else 0
        data += SHORT_HEADERS[flag][length] if length <= SHORT_MAX else long_header(flag, length)
        data += frame


def encode_records(records: list[list[bytes]]) -> tuple[bytearray, list[int]]:
    """Records end to end, and where each starts: what TopicLog.append_encoded takes
    (``encode_frames_into`` written out, with no call per record: an ACK's many)."""
    data = bytearray()
    starts: list[int] = []
    short_more, short_last = SHORT_HEADERS[MORE], SHORT_HEADERS[0]
    long_more, long_last = bytes((MORE | LONG,)), bytes((LONG,))
    pack_length = LONG_LENGTH.pack
    for frames in records:
        starts.append(len(data))
        if not frames:
            continue  # (nothing written, as encode_frames_into writes nothing)
        *more, last = frames
        for frame in more:
            length = len(frame)
            data += short_more[length] if length <= SHORT_MAX else long_more + pack_length(length)
            data += frame
        length = len(last)
        data += short_last[length] if length <= SHORT_MAX else long_last + pack_length(length)
        data += last
    return data, starts


def frame_at(data: Buffer, position: int, end: int) -> tuple[int, int, bool]:
    """(payload start, payload length, more frames follow) of the frame at ``position``:
    the frame rule, read frame by frame where a reader must say what is wrong.

    ArchiveFormatError for a flag byte with unknown bits; TornRecordError when the
    frame runs past ``end`` (its offset is the frame's flag byte).
    """
    if position >= end:
        raise TornRecordError("the record's last frame is missing", position)
    flag = data[position]
    if flag & ~(MORE | LONG):
        raise ArchiveFormatError(f"bad flag byte 0x{flag:02x}", position)
    header = 9 if flag & LONG else 2
    if position + header > end:
        raise TornRecordError("a frame header runs past the end", position)
    length = LONG_LENGTH.unpack_from(data, position + 1)[0] if flag & LONG else data[position + 1]
    if position + header + length > end:
        raise TornRecordError(f"a frame of {length} bytes runs past the end", position)
    return position + header, int(length), bool(flag & MORE)
