"""A BATCH on its way to one consumer (protocol 2 of the consume endpoint): many
deliveries in one multipart message, their entries joined into one frame.

A ROUTER refuses a message only at its first frame, so the batch's first frames go
out as its first delivery is added (a refusal then leaves nothing half sent) and its
entries frame when it is closed. Nothing else may be sent on the socket in between:
the sender closes it before any other send and at the end of each pass.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

from pzq.protocol import consume as consume_wire
from pzq.protocol.frame_groups import group_chunks
from pzq.protocol.frames import delivery_headers
from pzq.serving.holding import ServedConsumer
from pzq.store import record
from pzq.zmqio import Socket, begin_frames, send_last

MAX_BATCH_BYTES = 1 << 20  # a batch is closed once its entries reach this size
KEPT_PIECES = 4  # runs' sums, and pieces' frames, kept for a topic's other groups


class OpenBatch:
    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.consumer: ServedConsumer | None = None  # whose batch is open
        # its entries; empty while it holds one piece of one run's alone (``_piece``:
        # not copied out of the run's list unless another entry joins it)
        self.entries: list[bytes] = []
        self.size = 0
        # The last runs' entries and their sizes added up from their start (0 first),
        # the newest first: a topic's groups send the same run's entries
        # (pzq.serving.sending), each added up once for all (a few kept: the groups'
        # passes come in turn, one group's next run before another's last)
        self._sums: list[tuple[list[bytes], list[int]]] = []
        # The open batch's entries where they are one piece of one run's (the run's
        # entries, start, end; None: not so), and the last such pieces joined into
        # their frames: a topic's groups send the same piece of the same run, joined
        # once (at most KEPT_PIECES frames of MAX_BATCH_BYTES kept)
        self._piece: tuple[list[bytes], int, int] | None = None
        self._joined: list[tuple[list[bytes], int, int, bytes]] = []

    def add(self, consumer: ServedConsumer, key: bytes, value: bytes, deliveries: int,
            sent_us: int, ack_timeout_us: int, with_headers: bool) -> None:
        """Add a delivery to the consumer's batch, opened first if it is not open;
        raises zmq.Again (nothing added) when its pipe refuses a new batch."""
        self._open_for(consumer, sent_us, ack_timeout_us)
        if with_headers:
            headers = delivery_headers(deliveries, record.headers_of(value))
            header_group = b"".join(group_chunks(headers))
        else:
            header_group = consume_wire.NO_HEADER_GROUP
        entry = consume_wire.batch_entry(key, header_group, value[record.part_group_at(value):])
        self._own_entries().append(entry)
        self.size += len(entry)
        if self.size >= MAX_BATCH_BYTES:
            self.close()

    def add_run(self, consumer: ServedConsumer, entries: list[bytes], start: int, stop: int,
                sent_us: int, ack_timeout_us: int) -> int:
        """Add ``entries[start:stop]`` (batch entries made already) to the consumer's
        batch, opened first if it is not open, as far as the batch takes them: it is
        closed once full, as ``add`` closes it. Returns where the entries added end;
        raises zmq.Again (nothing added) when its pipe refuses a new batch."""
        self._open_for(consumer, sent_us, ack_timeout_us)
        sums = self._sums_of(entries)
        # the entry that brings the batch to its bound is its last (as with ``add``)
        below = sums[start]
        end = min(bisect_left(sums, MAX_BATCH_BYTES - self.size + below, start + 1, stop + 1),
                  stop)
        if self.size:  # (the batch holds entries: these join them)
            self._own_entries().extend(entries[start:end])
        else:  # its one piece, as the run's list holds it
            self._piece = (entries, start, end)
        self.size += sums[end] - below
        count = end - start
        if self.size >= MAX_BATCH_BYTES:
            self.close()
        return start + count

    def _sums_of(self, entries: list[bytes]) -> list[int]:
        """The entries' sizes added up from the first (0 first, then after each)."""
        kept = self._sums
        for made in kept:
            if made[0] is entries:
                return made[1]
        sums = list(accumulate(map(len, entries), initial=0))
        kept.insert(0, (entries, sums))
        del kept[KEPT_PIECES:]
        return sums

    def _open_for(self, consumer: ServedConsumer, sent_us: int, ack_timeout_us: int) -> None:
        """The consumer's batch open (another one's closed first): its first frames go
        now, so a refusal (zmq.Again) comes before anything of it is added."""
        if consumer is not self.consumer:
            self.close()
            begin_frames(self.socket, [*consumer.head, b"%d" % sent_us,
                                       b"%d" % ack_timeout_us])
            self.consumer = consumer

    def _own_entries(self) -> list[bytes]:
        """The open batch's entries as a list of its own, to add to (its one piece of a
        run's copied out first: it is no longer just that piece)."""
        piece = self._piece
        if piece is not None:
            entries, start, end = piece
            self.entries = entries[start:end]
            self._piece = None
        return self.entries

    def close(self) -> None:
        """Send the open batch's entries, if one is open."""
        if self.consumer is not None:
            send_last(self.socket, self._frame())
            self.consumer = None
            self.entries = []
            self.size = 0
            self._piece = None

    def _frame(self) -> bytes:
        """The open batch's entries joined: the same piece of the same run as the last
        batch's joined once (made anew for other entries, and kept when a piece)."""
        piece = self._piece
        if piece is None:
            return b"".join(self.entries)
        entries, start, end = piece
        kept = self._joined
        for joined in kept:
            if joined[0] is entries and joined[1] == start and joined[2] == end:
                return joined[3]
        frame = b"".join(entries[start:end])
        kept.insert(0, (entries, start, end, frame))
        del kept[KEPT_PIECES:]
        return frame

