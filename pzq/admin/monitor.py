"""The monitor socket: one table of verbs, each answered from counters, never a scan.

A request's last frame is the command, ``VERB [argument...]``; the reply goes back
along the request's envelope (REQ and DEALER alike): ``(envelope), (empty), text``.
MONITOR, STATS and PING are the monitor's own; every other verb is contributed by
the part that owns it (pzq.parts ``verbs``: the administration of dead letters,
topics and groups, the route table), and answered with the wake's time.

A verb that fails on what its own checks did not foresee is answered ERROR with a
short reason, its traceback goes to the log (``monitor_verb_failed``), and the node
goes on serving.

With --authorization, a verb that is not one of ``OPEN_VERBS`` (those that only
read) changes the node, and is answered only to a client key with ``admin = true``;
any other gets ERROR naming the verb. A verb added later needs admin unless it is
listed here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Protocol

import zmq

from pzq.admin.usage import alone
from pzq.agenda import Agenda
from pzq.authorization import ADMIN, NO_AUTHORIZATION, Authorization
from pzq.clock import Now
from pzq.counters import Counters
from pzq.errors import DecodeError
from pzq.hooks import nothing
from pzq.logs import get_logger
from pzq.parts import Figures, Part, Verb
from pzq.protocol import frames
from pzq.protocol.monitor_text import monitor_text
from pzq.too_large import TooLargeLog
from pzq.zmqio import POLLIN, Events, QuietSocket, Socket, drain_framed

log = get_logger("pzq.monitor")

MONITOR_BATCH = 64
REASON_SHOWN = 120  # characters of a failed verb's exception told to the asker
# the verbs that only read figures, names and keys: every key may ask them; the rest
# change the node and need admin
OPEN_VERBS = frozenset((b"MONITOR", b"STATS", b"PING", b"TOPICS", b"PENDING", b"DEAD",
                        b"ROUTES", b"REPLAYS"))
# why a command is refused: a key without admin, or one removed by a reload
NOT_ADMIN = "this client key may not administer the node (admin = false in the " \
    "--authorization file)"
REVOKED = "this client key was removed from the node's --curve-authorized-keys"


class Others(Protocol):
    """What the monitor answers for: every other part's figures and verbs."""

    def figures(self, now: Now) -> Figures: ...

    def verbs(self) -> dict[bytes, Verb]: ...


class Monitor(Part):
    """Polled by the socket's descriptor, not the socket (it is seldom busy, and its
    edge-triggered descriptor must be drained when it fires). Opened last: the verbs
    of the parts opened before it are its table."""

    def __init__(self, socket: Socket, parts: Others, counters: Counters,
                 authorization: Authorization = NO_AUTHORIZATION) -> None:
        self.socket = socket
        self.authorization = authorization
        self.quiet = QuietSocket(socket)
        self._rest: Callable[[], None] = nothing  # from the answer, until input (joined)
        self.counters = counters
        self.parts = parts
        self.too_large = TooLargeLog("monitor")
        self.table: dict[bytes, Verb] = {
            b"MONITOR": alone("MONITOR", lambda arguments, now:
                              monitor_text(parts.figures(now))),
            b"STATS": alone("STATS", lambda arguments, now:
                            json.dumps(parts.figures(now), sort_keys=True).encode()),
            b"PING": alone("PING", lambda arguments, now: b"PONG"),
            **parts.verbs(),
        }

    tells_wait = True  # a request its descriptor will not tell (pzq.agenda)

    def join(self, agenda: Agenda) -> None:
        # input left unread: the next wake at once, and its answer asked
        self.quiet.on_unread = partial(agenda.changed_at, self, "answer")
        self._rest = partial(agenda.rest, self, "answer", self.quiet.fd)

    def bound(self) -> list[Socket]:
        return [self.socket]

    def polled(self) -> list[Socket | int]:
        return [self.quiet.fd]

    def timeout_ms(self, now: Now) -> int | None:
        return 0 if self.quiet.unread else None  # a request its descriptor will not tell

    def close(self) -> None:
        self.socket.close()

    def answer(self, events: Events, now: Now) -> None:
        quiet = self.quiet
        if quiet.unread or events.get(quiet.fd, 0) & POLLIN:  # (QuietSocket.due, inline)
            self.answer_waiting(now)
            self.quiet.served()
            if not quiet.unread:
                self._rest()  # asked again when its descriptor fires

    def answer_waiting(self, now: Now) -> None:
        for first, request in drain_framed(self.socket, MONITOR_BATCH):
            self.counters.monitor_requests += 1
            # the command's length (the socket's frame cap bounds the envelope's)
            reason = frames.monitor_request_refusal(request[-1])
            if reason is not None:  # (no split of its words)
                self.too_large.refused(reason)
                envelope, reply = frames.monitor_envelope(request), f"ERROR: {reason}".encode()
                self._send(envelope, reply)
                continue
            try:
                envelope, verb, arguments = frames.decode_monitor_request(request)
            except DecodeError as exc:
                envelope, reply = request[:1], f"ERROR: {exc}".encode()
            else:
                rights = self.authorization.of(first)
                if rights.revoked:  # removed from --curve-authorized-keys: not even a read
                    reply = self._forbidden(verb, rights.holder, REVOKED)
                elif verb in OPEN_VERBS or verb not in self.table or rights.admin:
                    try:
                        reply = self.reply(verb, arguments, now)
                    except Exception as exc:  # a broker goes on serving: the asker is told
                        reply = _failed(verb, exc)
                else:
                    reply = self._forbidden(verb, self.authorization.key_of(first))
            self._send(envelope, reply)

    def _send(self, envelope: list[bytes], reply: bytes) -> None:
        try:
            self.socket.send_multipart(frames.encode_monitor_reply(envelope, reply),
                                       zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the asker is gone or not reading; a monitor reply is not owed

    def _forbidden(self, verb: bytes, who: str, why: str = NOT_ADMIN) -> bytes:
        shown = verb[:40].decode(errors="replace")  # (a revoked key's may be any bytes)
        self.authorization.refused(ADMIN, shown, who)
        return f"ERROR: FORBIDDEN {shown}: {why}".encode()

    def reply(self, verb: bytes, arguments: list[bytes], now: Now) -> bytes:
        handler = self.table.get(verb)
        if handler is not None:
            return handler(arguments, now)
        known = ", ".join(name.decode() for name in self.table)
        shown = verb[:40].decode(errors="replace")
        return f"ERROR: unknown command {shown!r}; known commands: {known}".encode()


def _failed(verb: bytes, error: Exception) -> bytes:
    """A verb that failed on something its own checks did not foresee: the traceback
    to the node's log, a short reason to the asker."""
    name = verb.decode(errors="replace")
    reason = f"{type(error).__name__}: {str(error)[:REASON_SHOWN]}"
    log.error("monitor_verb_failed", verb=name, error=reason, exc_info=error)
    return f"ERROR: {name} failed ({reason}); the node goes on, its log has the details" \
        .encode()
