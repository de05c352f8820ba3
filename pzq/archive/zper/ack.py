"""ZPAck: after each flush, every message it made durable, published on an XPUB.

Each ack is ``[topic][message id][offset]``: the message id is the first frame the
producer sent (ZPER's advice: make it the message's id), the offset 8 bytes
big-endian, where the record starts in its topic's log (the offset a FETCH of it
takes). SUB sockets subscribe by topic prefix as usual. The socket is an XPUB so
that the node sees subscriptions come and go (see ``ZperAck``) and can count
them; acks are published whether or not anyone listens.

No ack is lost without being counted: the XPUB refuses (``XPUB_NODROP``) when a
subscriber's queue of ``ACK_SNDHWM`` acks is full, instead of dropping as a PUB
does; the node keeps what was refused, in order, and sends it on later wakes. Only
past a backlog of ``ACK_BACKLOG`` kept acks are new ones dropped, and counted as
``dropped``.
"""

from __future__ import annotations

from collections import deque

import zmq

from pzq.archive.wiring import ArchiveWiring
from pzq.archive.zper.writer import WritesDurable, Written
from pzq.clock import Now
from pzq.endpoints import Endpoint, Metric, PlugIn
from pzq.events import EventHub
from pzq.logs import get_logger
from pzq.parts import Figures, Part
from pzq.protocol import zper as zp
from pzq.zmqio import POLLIN, Events, Socket, drain, send_frames

SUBSCRIBE, UNSUBSCRIBE = 1, 0
# Acks queued towards one subscriber (set before the bind: see pzq.sockets.bind).
# A burst of writes made durable by one flush is acked at once, faster than a
# subscriber reads; the queue takes the burst, the backlog what goes past it.
ACK_SNDHWM = 20_000
ACK_BACKLOG = 100_000  # acks kept while a subscriber's queue is full
RETRY_MS = 5  # how soon to send kept acks again

log = get_logger("pzq.zper")


class ZperAck:
    def __init__(self, socket: Socket, backlog: int = ACK_BACKLOG) -> None:
        self.socket = socket
        self.backlog = backlog
        # Not verbose: ZeroMQ then passes up a prefix's first subscription and its last
        # unsubscription only (also for a socket that closed), in pairs, so the count is
        # of the prefixes subscribed now; verbose, a prefix one socket subscribed twice
        # is taken back once and the count drifts.
        socket.setsockopt(zmq.XPUB_NODROP, 1)  # a full queue refuses: kept, not lost
        self.subscriptions = 0
        self.published = 0  # handed to ZeroMQ: in a subscriber's queue, or no one's topic
        self.dropped = 0  # refused past ACK_BACKLOG
        self._kept: deque[list[bytes]] = deque()
        self._dropping = False  # logged once a spell: until the backlog empties

    @property
    def waiting(self) -> int:
        """Acks kept until a subscriber's queue has room."""
        return len(self._kept)

    def timeout_ms(self) -> int | None:
        """How soon the loop must wake to send kept acks; None with none kept."""
        return RETRY_MS if self._kept else None

    def take_subscriptions(self, limit: int) -> None:
        for frames in drain(self.socket, limit):
            event = frames[0][:1]
            if event == bytes((SUBSCRIBE,)):
                self.subscriptions += 1
            elif event == bytes((UNSUBSCRIBE,)) and self.subscriptions:
                self.subscriptions -= 1

    def publish(self, durable: list[Written]) -> None:
        """Send the acks of these writes after those kept, keeping what a full queue
        refuses; past the backlog the rest are dropped."""
        self.send_kept()
        kept = self._kept
        for at, written in enumerate(durable):
            frames = zp.encode_ack(written.topic, written.message_id, written.offset)
            if not kept and self._send(frames):
                continue
            if len(kept) >= self.backlog:
                self._drop(len(durable) - at)
                return
            kept.append(frames)

    def send_kept(self) -> None:
        """Send kept acks in order until a subscriber's queue is full."""
        kept = self._kept
        while kept:
            if not self._send(kept[0]):
                return
            kept.popleft()
        self._dropping = False

    def _send(self, frames: list[bytes]) -> bool:
        try:
            send_frames(self.socket, frames)
        except zmq.Again:
            return False
        self.published += 1
        return True

    def _drop(self, count: int) -> None:
        if not self._dropping:
            self._dropping = True
            log.warning("zper_acks_dropped", dropped=count, kept=len(self._kept),
                        reason="a subscriber reads too slowly and the backlog is full")
        self.dropped += count


class ZperAckPart(Part):
    """--zper-ack-dsn in the loop: after the writer part has answered, the acks of what
    became durable (and those a full queue refused before); subscriptions counted.
    Without a writer nothing becomes durable, and nothing is published."""

    def __init__(self, ack: ZperAck, batch: int, hub: EventHub) -> None:
        self.ack = ack
        self.batch = batch
        self.durable: list[Written] = []  # heard this wake, from the writer
        hub.subscribe(WritesDurable, self._durable)

    def _durable(self, durable: WritesDurable) -> None:
        self.durable.extend(durable.writes)

    def bound(self) -> list[Socket]:
        return [self.ack.socket]

    def polled(self) -> list[Socket | int]:
        return [self.ack.socket]

    def timeout_ms(self, now: Now) -> int | None:
        return self.ack.timeout_ms()

    def answer(self, events: Events, now: Now) -> None:
        durable, self.durable = self.durable, []
        self.ack.publish(durable)
        if events.get(self.ack.socket, 0) & POLLIN:
            self.ack.take_subscriptions(self.batch)

    def figures(self, now: Now) -> Figures:
        ack = self.ack
        return {"subscriptions": ack.subscriptions, "published": ack.published,
                "dropped": ack.dropped, "waiting": ack.waiting}

    def close(self) -> None:
        self.ack.socket.close()


def open_ack(wiring: ArchiveWiring, dsn: str) -> Part:
    socket = wiring.bind(zmq.XPUB, dsn, ZPER_ACK_DSN.flag, {zmq.SNDHWM: ACK_SNDHWM})
    return ZperAckPart(ZperAck(socket), wiring.config.batch_size, wiring.hub)


ZPER_ACK_DSN = Endpoint(
    "zper_ack", "zper_ack_dsn", "archive: endpoint publishing ZPER acks after each flush "
    "(off when unset)", needs=("archive_dir",), stats=("zper", "ack"),
    metrics=(Metric("pzq_zper_acks_published", "published", "ZPAck acks sent (to every "
                    "subscriber of their topic, or to none)."),
             Metric("pzq_zper_acks_dropped", "dropped", "ZPAck acks dropped: a "
                    "subscriber's queue and the node's backlog were full."),
             Metric("pzq_zper_ack_subscriptions", "subscriptions", "Open ZPAck subscriptions.",
                    counter=False),
             Metric("pzq_zper_acks_waiting", "waiting",
                    "ZPAck acks kept until a subscriber's queue has room.", counter=False)))
ZPER_ACK = PlugIn(ZPER_ACK_DSN, open_ack)
