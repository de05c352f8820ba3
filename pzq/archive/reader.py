"""Reading the archive from a node's ZPER reader socket (files: pzq.archive.format.files)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import zmq

from pzq import curve_probe, reach
from pzq.archive.damage import DamagedRecord, DamageHandler, log_damage, logger
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.records import Damaged, MessageRecord, walk
from pzq.archive.format.segments import segment_name
from pzq.client import router_probe
from pzq.client.common import remaining_ms, send_before
from pzq.client.sessions.group import ROUTER_CHECK_AFTER_S
from pzq.errors import ReaderError, dealer_at, reader_refusal
from pzq.protocol import zper as zp
from pzq.security import ClientSecurity, plain_if_none
from pzq.sockets import dual_stack

Context = zmq.Context[zmq.Socket[bytes]]
EVERY_SEGMENT_MS = 1 << 62  # an OFFSET time after every segment's last change


def resume_at(topic: str, offset: int | None, first: int, end: int) -> int:
    """Where a read from ``offset`` starts, given the topic's first offset kept and its
    end: an offset that retention deleted since it was kept goes on from the first kept,
    with one warning line (as ``pzq-archive dump --from``); one past the end, which no
    read of this archive handed out, is a ValueError naming both."""
    if offset is None:
        return first
    if offset > end:
        raise ValueError(f"offset {offset} is past the end of the archive of topic {topic} "
                         f"({end}): it is not one a read of this archive handed out")
    if offset < first:
        logger().warning("archive_records_lost", topic=topic, offset=offset,
                         first_kept=first, reason="deleted by retention before this read")
        return first
    return offset


class ArchiveReader:
    """A ZPER reader client for one topic; resume by passing the offset you stored.

    ``messages`` yields each record's start offset; ``next_offset`` is where a read goes
    on after the record handed out last: keep that one to resume without reading the
    record again.

    A damaged record is skipped: handed to ``on_damage`` (default: one warning line;
    ``pzq.archive.damage.raise_damage`` stops instead) and kept in ``damaged``.
    With CURVE on the node, give ``curve`` (this client's key pair and the node's
    public key), as to the other clients. A request not answered within ``timeout``
    seconds raises TimeoutError saying why (no node there, a refused handshake).
    """

    def __init__(self, dsn: str, topic: str, context: Context | None = None,
                 timeout: float = 10.0, on_damage: DamageHandler = log_damage,
                 curve: ClientSecurity | None = None) -> None:
        self.dsn = dsn
        self.topic = topic
        self.timeout = timeout
        self.on_damage = on_damage
        self.damaged: list[DamagedRecord] = []
        self._curve = plain_if_none(curve)
        self.next_offset = 0  # after the last record ``messages`` handed out or skipped
        self._socket: zmq.Socket[bytes] = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic))
        self._socket.setsockopt(zmq.LINGER, 0)
        self._curve.apply(self._socket)
        dual_stack(self._socket, dsn)
        self._socket.connect(dsn)

    def _request(self, frames: list[bytes]) -> list[bytes]:
        deadline = time.monotonic() + self.timeout
        sent = send_before(self._socket, frames, deadline)
        check_at = min(deadline, time.monotonic() + ROUTER_CHECK_AFTER_S)
        if sent and not self._socket.poll(remaining_ms(check_at)) and check_at < deadline \
                and router_probe.is_router(self.dsn, self._curve) is False:
            raise dealer_at(self.dsn, ROUTER_CHECK_AFTER_S)  # a DEALER never answers
        if not (sent and self._socket.poll(remaining_ms(deadline))):
            why = curve_probe.why_silent(self.dsn, self._curve,
                                         min(self.timeout, reach.PROBE_TIMEOUT_S))
            raise TimeoutError(f"no answer from {self.dsn} within {self.timeout:g} s: {why}")
        status, *rest = self._socket.recv_multipart()
        if status[0] != zp.OK:
            raise reader_refusal(self.dsn, status)
        return rest

    def _offsets(self, timestamp_ms: int) -> list[int]:
        return [int(zp.INT64.unpack(frame)[0])
                for frame in self._request(zp.encode_offset_request(timestamp_ms))]

    def earliest(self) -> int:
        """The first offset (0 for a topic with nothing archived, as ZPER answers)."""
        return self._offsets(zp.EARLIEST)[0]

    def latest(self) -> int:
        """The end offset (ZPER answers the last segment's start, then the end)."""
        return self._offsets(zp.LATEST)[-1]

    def fetch(self, offset: int, max_bytes: int = 1 << 20) -> list[tuple[int, ArchivedMessage]]:
        """The whole records of one FETCH; damaged ones are reported and left out
        (``messages`` walks past them)."""
        return [(item.offset, item.message) for item in self._fetch(offset, max_bytes)[0]
                if isinstance(item, MessageRecord)]

    def _fetch(self, offset: int, max_bytes: int) -> tuple[list[MessageRecord | Damaged], int]:
        """The records and damaged records of one FETCH, and the reply's length."""
        (data,) = self._request(zp.encode_fetch_request(offset, max_bytes))
        items: list[MessageRecord | Damaged] = []
        for item in walk(data, base=offset):
            if isinstance(item, Damaged):
                self._report(item)
            if isinstance(item, MessageRecord | Damaged):
                items.append(item)  # not a torn tail: a server that cut a record short
        return items, len(data)

    def _report(self, item: Damaged) -> None:
        starts = [start for start in self._offsets(EVERY_SEGMENT_MS)[:-1]
                  if start <= item.offset]
        record = DamagedRecord(self.topic, segment_name(max(starts, default=0)), item.offset,
                               item.size, item.first_bad, item.reason)
        self.damaged.append(record)
        self.on_damage(record)

    def messages(self, offset: int | None = None,
                 max_bytes: int = 1 << 20) -> Iterator[tuple[int, ArchivedMessage]]:
        """Every message from ``offset`` (default: the earliest) to the end the
        archive's last fsync made durable (a FETCH hands out no more), with its start
        offset; none when the topic has no log yet. ``next_offset`` follows. An offset
        retention deleted goes on from the first kept, saying so (``resume_at``)."""
        try:
            first, end = self.earliest(), self.latest()
        except ReaderError as exc:
            if exc.status == zp.INVALID_OFFSET:
                return  # a server that answers 101 for a topic with no log yet
            raise
        position = resume_at(self.topic, offset, first, end)
        self.next_offset = position
        while position < end:
            items, replied = self._fetch(position, max_bytes)
            if not replied:
                return
            if not items:
                max_bytes *= 2  # a record longer than max_bytes, from a server that cuts
                continue
            for item in items:
                self.next_offset = item.offset + item.size
                if isinstance(item, MessageRecord):
                    yield item.offset, item.message
            position = items[-1].offset + items[-1].size

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
