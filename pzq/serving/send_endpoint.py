"""The consumers on --send-dsn: the original pzq's frames, served as the group
``default`` through the same path as every named group (pzq.serving.answers).

A DEALER hands each delivery to the next consumer connected; the node cannot tell
them apart, so they are one pool whose credit is the delivery window
(pzq.delivery.window), grown while they keep up and halved when deliveries expire.
Own messages go first (once the cluster lets this node deliver after a start), then
those of down nodes this node took over. A consumer ACK ``1`` is an ACK, any other
status gives the message back; a malformed one is counted and ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from operator import itemgetter

import zmq

from pzq.agenda import Agenda
from pzq.clock import Now
from pzq.counters import Counters
from pzq.delivery.window import DeliveryWindow
from pzq.errors import DecodeError
from pzq.hooks import nothing
from pzq.logs import get_logger
from pzq.parts import REAP, Part
from pzq.protocol import frames
from pzq.protocol.message_keys import first_bad_key
from pzq.serving.answers import GroupAnswers
from pzq.serving.connections import ConsumerCount
from pzq.serving.holding import GroupDelivery, ServedConsumer
from pzq.serving.sending import Sender
from pzq.store.batch import Batch
from pzq.zmqio import POLLIN, POLLOUT, Events, PollEntry, Socket, drain_list, writable

log = get_logger("pzq.send")

OwnAllowed = Callable[[float], bool]  # monotonic now -> own messages may go out
ReapElsewhere = Callable[[int], int]  # µs now -> taken-over deliveries that expired
FIRST, SECOND = itemgetter(0), itemgetter(1)


def always(mono: float) -> bool:
    return True


def _rest_unpolled(agenda: Agenda, part: Part) -> None:
    """No consumer connected: ``interest`` and ``send_out`` have nothing to do."""
    agenda.rest(part, "interest")
    agenda.rest(part, "send_out")


def _ask_polled(agenda: Agenda, part: Part) -> None:
    """A consumer came or went: both are asked again."""
    agenda.ask(part, "interest")
    agenda.ask(part, "send_out")


def _all_acks(raws: list[list[bytes]]) -> list[bytes] | None:
    """The keys of consumer answers that are all ACKs as decode_consumer_ack reads them
    (a key and the status ``1``), in one pass each; None when any is not one."""
    if set(map(len, raws)) != {2}:
        return None
    keys = list(map(FIRST, raws))
    if set(map(SECOND, raws)) != {frames.STATUS_OK} or b"" in keys:
        return None
    return keys


class SendEndpoint(Part):
    """``reap_elsewhere``: the takeovers' expiry (every group's), run at the reaper's
    tick before any group reaps its own (the loop asks this part first)."""

    def __init__(self, socket: Socket, connections: ConsumerCount, deliveries: GroupDelivery,
                 answers: GroupAnswers, window: DeliveryWindow, counters: Counters,
                 batch_size: int, reaper_period_us: int, reap_elsewhere: ReapElsewhere,
                 own_allowed: OwnAllowed = always) -> None:
        self.socket = socket
        self.connections = connections  # watching the socket since before its bind
        self.reaper_period_us = reaper_period_us
        self.reap_elsewhere = reap_elsewhere
        self._polled_out = False  # the last poll looked for room to deliver
        self._poll_entry = PollEntry(socket)
        self._unpolled: Callable[[], None] = nothing  # the interest's rest (pzq.agenda)
        self._polled: Callable[[], None] = nothing
        self._silent: Callable[[], None] = nothing  # the answer's rest until the monitor speaks
        self.deliveries = deliveries
        self.answers = answers
        self.window = window
        self.counters = counters
        self.batch_size = batch_size
        self.own_allowed = own_allowed
        self.pool = ServedConsumer(b"", deliveries, window=0, last_heard=0.0, pool=True)
        deliveries.consumers.append(self.pool)
        self.sender = Sender(socket)

    def unacked(self) -> int:
        return sum(len(state.inflight) for state in self.deliveries.every_state())

    def has_work(self, mono: float) -> bool:
        return (any(state.has_work() for state in self.deliveries.sources(self.own_allowed(mono)))
                and self.window.room(self.unacked()) > 0)

    # -- the loop's questions ------------------------------------------------------

    def backlogged(self) -> bool:
        return bool(self.connections.connected) and any(
            state.has_work() for state in self.deliveries.sources(True))

    def bound(self) -> list[Socket]:
        return [self.socket]

    def ticks(self) -> dict[bytes, int]:
        return {REAP: self.reaper_period_us}  # every group's reaper (--reaper-frequency)

    def polled(self) -> list[Socket | int]:
        return [self.connections.quiet.fd]

    tells_wait = True  # connections to count: told by the monitor's socket (pzq.agenda)

    def join(self, agenda: Agenda) -> None:
        # input left unread: the next wake at once, and its answer asked
        self.connections.quiet.on_unread = partial(agenda.changed_at, self, "answer")
        self._unpolled = partial(_rest_unpolled, agenda, self)
        self._polled = partial(_ask_polled, agenda, self)
        self._silent = partial(agenda.rest, self, "answer", self.connections.quiet.fd)

    def timeout_ms(self, now: Now) -> int | None:
        return 0 if self.connections.quiet.unread else None  # connections to count

    def close(self) -> None:
        self.connections.close()
        self.socket.close()

    def interest(self, poller: zmq.Poller, now: Now, delivering: bool) -> None:
        """ACKs while consumers are connected, and once more after one came or went
        (the answers it sent before it left are read); room to deliver only when there
        is something to deliver. With no consumer the socket is not polled at all: each
        ZeroMQ socket in the poll costs a wake an EVENTS call or two."""
        listening = self.connections.listen()
        self._polled_out = listening and delivering and self.has_work(now.mono)
        flags = (POLLIN | (POLLOUT if self._polled_out else 0)) if listening else 0
        self._poll_entry.poll_for(poller, flags)  # 0: out of the poll
        if not flags:
            # no consumer: not asked (nor is ``send_out``, which has no one to deliver
            # to) until the monitor speaks (``answer``)
            self._unpolled()

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if REAP in reasons:
            self.reap(now.wall_us, self.reap_elsewhere(now.wall_us))

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        answers = events.get(self.socket, 0) & POLLIN
        if answers:
            self.take_acks(batch, now.wall_us, now.mono)
        if answers or self.connections.listening:  # (else it has nothing to hear)
            self.connections.heard(bool(answers))
        # (``retire_dead``'s) asked only when a state has given some up: most wakes
        # (a producer's message, with no consumer) have none, and skip its list and call
        deliveries = self.deliveries
        own = deliveries.state
        if own.newly_dead or own.newly_dropped or deliveries.taken_over():
            self.answers.retire_dead(deliveries, now.wall_us)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        """The poll said whether consumers had room, when it looked (and with none
        connected there is none)."""
        if delivering:
            room = (bool(events.get(self.socket, 0) & POLLOUT) if self._polled_out
                    else None if self.connections.listening else False)
            self.deliver(now.wall_us, now.mono, room)

    def answer(self, events: Events, now: Now) -> None:
        """The monitor's word on connections: asked only in a wake whose poll found its
        descriptor ready, or while it holds input unread."""
        if self.connections.came_or_went(events) is not None:
            self._polled()
        if not self.connections.quiet.unread:
            self._silent()

    # -- consumer ACKs ---------------------------------------------------------------

    def take_acks(self, batch: Batch, now_us: int, mono: float) -> None:
        """Every answer waiting: the ACKs in a row applied in one call (one bulk ACK
        for a wake's many consumer messages), each NACK in its turn."""
        answered = self.counters.acked + self.counters.nacked
        raws = drain_list(self.socket, self.batch_size)
        acks = _all_acks(raws)
        if acks is not None:  # (mostly: each a well-formed ACK, looked at in C)
            self._ack_run(batch, acks, now_us, mono)
            self.window.acked(self.counters.acked + self.counters.nacked - answered)
            return
        acks = []
        for raw in raws:
            try:
                key, ok = frames.decode_consumer_ack(raw)
            except DecodeError as exc:  # a bad frame: nothing was applied
                self._malformed(exc)
                continue
            if ok:
                acks.append(key)
                continue
            self._ack_run(batch, acks, now_us, mono)
            acks = []
            try:
                self.answers.answer(batch, self.pool, False, (key,), now_us, mono)
            except DecodeError as exc:  # a bad key: nothing was applied
                self._malformed(exc)
        self._ack_run(batch, acks, now_us, mono)
        self.window.acked(self.counters.acked + self.counters.nacked - answered)

    def _ack_run(self, batch: Batch, keys: list[bytes], now_us: int, mono: float) -> None:
        """ACKs in a row. A key that is no message key stops their answer where it
        stands (those before it are applied): it is counted, and the rest go on."""
        while keys:
            try:
                self.answers.answer(batch, self.pool, True, keys, now_us, mono)
                return
            except DecodeError as exc:
                self._malformed(exc)
                keys = keys[first_bad_key(keys) + 1:]

    def _malformed(self, exc: DecodeError) -> None:
        self.counters.bad_consumer_acks += 1
        log.debug("consumer_ack_malformed", reason=str(exc))

    def retire_dead(self, now_us: int) -> None:
        """Messages ``default`` gave up this wake (by a NACK past --max-deliveries)."""
        self.answers.retire_dead(self.deliveries, now_us)

    def reap(self, now_us: int, expired_elsewhere: int) -> None:
        """Expired deliveries back; the window halves after any expiry (a takeover's
        states are reaped with the takeover: ``expired_elsewhere``)."""
        expired = self.answers.reap(self.deliveries, now_us)
        self.window.expired(expired + expired_elsewhere)

    # -- deliveries --------------------------------------------------------------------

    def deliver(self, now_us: int, mono: float, room_known: bool | None = None) -> None:
        """``room_known``: whether the last poll found room on the socket (None when
        it did not look); without room nothing is read that could not be sent."""
        self.window.update(now_us)
        if room_known is False or (room_known is None and not (self.has_work(mono)
                                                               and writable(self.socket))):
            return  # (nothing to send: no EVENTS call to ask for room)
        deliveries, pool = self.deliveries, self.pool
        for state in deliveries.sources(self.own_allowed(mono)):
            if not state.has_work():
                continue
            room = self.window.room(self.unacked())
            if room == 0:
                return
            sender = self.sender  # (runs of first deliveries in one go each)
            state.deliver_raw(state.framing(sender.for_pool(pool), now_us), now_us,
                              min(room, self.batch_size),
                              sender.for_pool_run(pool, state, now_us))
