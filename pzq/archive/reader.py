"""Reading the archive from a node's ZPER reader socket (files: pzq.archive.files)."""

from __future__ import annotations

from collections.abc import Iterator

import zmq

from pzq.archive.codec import decode_records, encoded_size
from pzq.archive.entry import ArchivedMessage
from pzq.errors import ReaderError
from pzq.protocol import zper as zp


class ArchiveReader:
    """A ZPER reader client for one topic; resume by passing the offset you stored."""

    def __init__(self, dsn: str, topic: str, context: zmq.Context | None = None,
                 timeout: float = 10.0) -> None:
        self.topic = topic
        self.timeout_ms = int(timeout * 1000)
        self._socket = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic))
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(dsn)

    def _request(self, frames: list[bytes]) -> list[bytes]:
        self._socket.send_multipart(frames)
        if not self._socket.poll(self.timeout_ms):
            raise TimeoutError("the archive reader did not answer")
        status, *rest = self._socket.recv_multipart()
        if status[0] != zp.OK:
            raise ReaderError(status[0])
        return rest

    def earliest(self) -> int:
        """The first offset; ReaderError 101 when the topic has no log."""
        return zp.INT64.unpack(self._request(zp.encode_offset_request(zp.EARLIEST))[0])[0]

    def latest(self) -> int:
        """The end offset (ZPER answers the last segment's start, then the end)."""
        return zp.INT64.unpack(self._request(zp.encode_offset_request(zp.LATEST))[-1])[0]

    def fetch(self, offset: int, max_bytes: int = 1 << 20) -> list[tuple[int, ArchivedMessage]]:
        (data,) = self._request(zp.encode_fetch_request(offset, max_bytes))
        return [(offset + position, ArchivedMessage.from_frames(frames, offset + position))
                for position, frames in decode_records(data)]

    def messages(self, offset: int | None = None,
                 max_bytes: int = 1 << 20) -> Iterator[tuple[int, ArchivedMessage]]:
        """Every message from ``offset`` (default: the earliest) to the current end;
        none when the topic has no log yet."""
        try:
            position = self.earliest() if offset is None else offset
            end = self.latest()
        except ReaderError as exc:
            if exc.status == zp.INVALID_OFFSET:
                return  # no log for this topic: nothing archived under it yet
            raise
        while position < end:
            batch = self.fetch(position, max_bytes)
            if not batch:
                return
            yield from batch
            last_offset, last = batch[-1]
            position = last_offset + encoded_size(last.frames())

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
