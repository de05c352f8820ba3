"""Reading the archive from a node's ZPER reader socket, awaited: the asyncio form of
pzq.archive.reader.ArchiveReader, with its answers, damage handling and errors.

ZPER's replies carry no request id, so one request is out at a time, and a request
that ends without its reply (cancelled, or timed out) takes its socket with it: the
next request has a socket of its own, where no late reply can be taken for its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import zmq

from pzq.aio import probe
from pzq.aio.socket_io import AsyncContext, AsyncSocket, open_socket, wait_events
from pzq.archive.damage import DamagedRecord, DamageHandler, log_damage
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.records import Damaged, MessageRecord, walk
from pzq.archive.format.segments import segment_name
from pzq.archive.reader import EVERY_SEGMENT_MS, resume_at
from pzq.client.sessions.group import ROUTER_CHECK_AFTER_S
from pzq.errors import ClientClosed, ReaderError, dealer_at, reader_refusal
from pzq.protocol import zper as zp
from pzq.security import ClientSecurity
from pzq.zmqio import POLLIN, POLLOUT, recv_frames, send_frames


class ArchiveReader:
    """A ZPER reader client for one topic; resume by passing the offset you stored. A
    damaged record is skipped, handed to ``on_damage`` and kept in ``damaged``; a
    request not answered within ``timeout`` seconds raises TimeoutError saying why.
    With CURVE on the node, give ``curve``, as to the other clients."""

    def __init__(self, dsn: str, topic: str, timeout: float = 10.0,
                 on_damage: DamageHandler = log_damage, curve: ClientSecurity | None = None,
                 context: AsyncContext | None = None) -> None:
        self.dsn = dsn
        self.topic = topic
        self.timeout = timeout
        self.on_damage = on_damage
        self.damaged: list[DamagedRecord] = []
        self._curve = curve
        self._context = context
        self._one_at_a_time = asyncio.Lock()
        self._closed = False
        self._socket = self._open()

    def _open(self) -> AsyncSocket:
        return open_socket(self._context, zmq.DEALER, self.dsn, self._curve,
                           {zmq.IDENTITY: zp.make_identity(self.topic), zmq.LINGER: 0})

    async def _request(self, frames: list[bytes]) -> list[bytes]:
        async with self._one_at_a_time:
            if self._closed:
                raise ClientClosed("the archive reader is closed")
            answered = False
            try:
                reply = await self._exchange(frames, time.monotonic() + self.timeout)
                answered = reply is not None
            finally:
                if not answered and not self._closed:  # a late reply is not the next one's
                    self._socket.close()
                    self._socket = self._open()
        if reply is None:
            why = await probe.why_silent(self.dsn, self._curve,
                                         min(self.timeout, probe.PROBE_TIMEOUT_S))
            raise TimeoutError(f"no answer from {self.dsn} within {self.timeout:g} s: {why}")
        status, *rest = reply
        if status[0] != zp.OK:
            raise reader_refusal(self.dsn, status)
        return rest

    async def _exchange(self, frames: list[bytes], deadline: float) -> list[bytes] | None:
        socket = self._socket
        for events in (POLLOUT, POLLIN):
            if events == POLLIN and not await self._answers_within(ROUTER_CHECK_AFTER_S,
                                                                   deadline):
                raise dealer_at(self.dsn, ROUTER_CHECK_AFTER_S)  # a DEALER never answers
            left = deadline - time.monotonic()
            if left <= 0 or not await wait_events(socket, events, left, "archive reader"):
                return None
            if events == POLLOUT:
                send_frames(socket, frames)
        return recv_frames(socket)

    async def _answers_within(self, check_after_s: float, deadline: float) -> bool:
        """False when nothing answered within ``check_after_s`` (before the deadline)
        and a DEALER, not a ROUTER, is what answers at the endpoint."""
        left = min(deadline - time.monotonic(), check_after_s)
        if left <= 0 or deadline - time.monotonic() <= check_after_s:
            return True  # the deadline comes first: its timeout says why
        if await wait_events(self._socket, POLLIN, left, "archive reader"):
            return True
        return await probe.is_router(self.dsn, self._curve) is not False

    async def _offsets(self, timestamp_ms: int) -> list[int]:
        return [int(zp.INT64.unpack(frame)[0])
                for frame in await self._request(zp.encode_offset_request(timestamp_ms))]

    async def earliest(self) -> int:
        """The first offset (0 for a topic with nothing archived, as ZPER answers)."""
        return (await self._offsets(zp.EARLIEST))[0]

    async def latest(self) -> int:
        """The end offset (ZPER answers the last segment's start, then the end)."""
        return (await self._offsets(zp.LATEST))[-1]

    async def fetch(self, offset: int,
                    max_bytes: int = 1 << 20) -> list[tuple[int, ArchivedMessage]]:
        """The whole records of one FETCH; damaged ones are reported and left out."""
        return [(item.offset, item.message) for item in (await self._fetch(offset, max_bytes))[0]
                if isinstance(item, MessageRecord)]

    async def _fetch(self, offset: int,
                     max_bytes: int) -> tuple[list[MessageRecord | Damaged], int]:
        (data,) = await self._request(zp.encode_fetch_request(offset, max_bytes))
        items: list[MessageRecord | Damaged] = []
        for item in walk(data, base=offset):
            if isinstance(item, Damaged):
                await self._report(item)
            if isinstance(item, MessageRecord | Damaged):
                items.append(item)  # not a torn tail: a server that cut a record short
        return items, len(data)

    async def _report(self, item: Damaged) -> None:
        starts = [start for start in (await self._offsets(EVERY_SEGMENT_MS))[:-1]
                  if start <= item.offset]
        record = DamagedRecord(self.topic, segment_name(max(starts, default=0)), item.offset,
                               item.size, item.first_bad, item.reason)
        self.damaged.append(record)
        self.on_damage(record)

    async def messages(self, offset: int | None = None, max_bytes: int = 1 << 20
                       ) -> AsyncIterator[tuple[int, ArchivedMessage]]:
        """Every message from ``offset`` (default: the earliest) to the end the
        archive's last fsync made durable; none when the topic has no log yet."""
        try:
            first, end = await self.earliest(), await self.latest()
        except ReaderError as exc:
            if exc.status == zp.INVALID_OFFSET:
                return  # a server that answers 101 for a topic with no log yet
            raise
        position = resume_at(self.topic, offset, first, end)
        while position < end:
            items, replied = await self._fetch(position, max_bytes)
            if not replied:
                return
            if not items:
                max_bytes *= 2  # a record longer than max_bytes, from a server that cuts
                continue
            for item in items:
                if isinstance(item, MessageRecord):
                    yield item.offset, item.message
            position = items[-1].offset + items[-1].size

    async def close(self) -> None:
        """Close the socket; a request waiting then raises ClientClosed, as any after."""
        self._closed = True
        self._socket.close()

    async def __aenter__(self) -> ArchiveReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
