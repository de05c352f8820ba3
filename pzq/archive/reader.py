"""Reading the archive from a node's ZPER reader socket (files: pzq.archive.files)."""

from __future__ import annotations

from collections.abc import Iterator

import zmq

from pzq.archive import zper_protocol as zp
from pzq.archive.codec import decode_records, encoded_size
from pzq.archive.entry import ArchivedMessage


class ReaderError(Exception):
    """The reader socket answered with an error status (ZPER's status byte)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"archive reader answered status {status}")
        self.status = status


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
        return zp.INT64.unpack(self._request(zp.encode_offset_request(zp.EARLIEST))[0])[0]

    def latest(self) -> int:
        return zp.INT64.unpack(self._request(zp.encode_offset_request(zp.LATEST))[0])[0]

    def fetch(self, offset: int, max_bytes: int = 1 << 20) -> list[tuple[int, ArchivedMessage]]:
        (data,) = self._request(zp.encode_fetch_request(offset, max_bytes))
        return [(offset + position, ArchivedMessage.from_frames(frames, offset + position))
                for position, frames in decode_records(data)]

    def messages(self, offset: int | None = None,
                 max_bytes: int = 1 << 20) -> Iterator[tuple[int, ArchivedMessage]]:
        """Every message from ``offset`` (default: the earliest) to the current end."""
        position = self.earliest() if offset is None else offset
        end = self.latest()
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
