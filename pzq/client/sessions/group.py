"""The session of a consumer of one group on a node's --consume-dsn (docs/groups.rst,
"The consume endpoint"; frames in pzq.protocol.consume).

Joining: ``consume`` is the first CONSUME. Until the node's CONSUMING (``joined``),
an ERROR refuses the group (ConsumeRefused), unless it refuses only the PROTOCOL
option: an older node, asked again without it, in protocol 1. The session asks for
protocol 2 (``LATEST_PROTOCOL``): deliveries come in batches and many keys go in
one ACK frame.

Joined: deliveries (DELIVER, or a BATCH decoded at once, in columns, its
deliveries made in one pass) wait in ``arrived`` in turn. An ERROR is kept in
``errors``; when it says the node does not know this connection (it restarted,
or counted the consumer gone) the session joins again, and what the node held
comes again. The keys of ACKs the node refused so (REFUSED) go with that CONSUME,
which the node applies before it delivers anything. What came before that ERROR
the node has forgotten (given back, or lost with a kill: ready again) and is not
NACKed (``forgot_upto_us``): a key names a message, not a delivery, and the node's
delivery of the same message since, maybe to this very consumer, would be given
back in its place (at once, whatever delay that one's own NACK asks for); its ACK
still goes (the message is done with). ACKED answers the ACKs awaited with
confirmations. When the ERROR says an operator removed the group, or that this
client's key may no longer consume it (the node's --authorization rules changed, or
refused a CONSUME again): ConsumeRefused, then and at whatever comes after (a CONSUME
again would make the group anew, or be refused).

Time: a consumer stays alive through its connection's own heartbeats, so nothing
here must happen for it to live; a HEARTBEAT goes when a period passed with
nothing sent (``wake``, due at ``next_deadline``), so that a node that restarted
says it does not know the connection, and the consumer joins again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import islice, repeat
from typing import Any, Generic

from pzq.client.sessions.delivered import M, MakeMessage, deliveries
from pzq.errors import ConsumeRefused, DecodeError
from pzq.protocol import consume as consume_wire
from pzq.protocol.batch_columns import decode_batch_columns
from pzq.protocol.frames import parse_headers
from pzq.protocol.message_keys import MESSAGE_KEY_PATTERN

NOT_CONSUMING = "before CONSUME: send CONSUME first"
REJOIN_AGAIN_PERIODS = 2  # a CONSUME sent again, unanswered this long (heartbeats), is lost
REMOVED = " was removed"  # "group g of topic t was removed": an operator removed it
FORBIDDEN = "FORBIDDEN consume "  # this key may no longer consume the group
Out = Sequence[list[bytes]]  # messages to send now, in order
NOTHING: Out = ()
NO_HEADERS: dict[str, str] = {}  # never changed: copied for each delivery without headers


def not_a_consume_endpoint(frames: list[bytes]) -> str:
    """What the answer to CONSUME says when another of the node's ROUTER endpoints sent
    it: they answer the request's own frames back before their reply (a consume
    endpoint never sends CONSUME), and waiting on would only end in a timeout."""
    if len(frames) == 4 and frames[1] in (b"0", b"1") and frames[2] == b"":
        kind = "a node's --receive-dsn does, with a producer's ACK"
    elif frames[-1].startswith(b"ERROR: unknown command"):
        kind = "a node's --monitor-dsn does, with ERROR: unknown command"
    else:
        kind = "another endpoint does, with CONSUME sent back"
    return (f"this is not a node's --consume-dsn: it answered as {kind}; give the "
            "node's --consume-dsn")


# a node's --send-dsn is a DEALER: it takes the consumer's connection and never answers
SEND_ANSWERED = ("this is not a node's --consume-dsn: a DEALER answers there, as a node's "
                 "--send-dsn does (no ROUTER); give the node's --consume-dsn")
# unanswered this long, the shell asks whether a ROUTER is there at all (router_told)
ROUTER_CHECK_AFTER_S = 1.0


class GroupSession(Generic[M]):
    """A consumer of ``subscribe``'s group, its deliveries made with ``make`` for
    ``owner`` (the shell); ``now`` is when it starts."""

    def __init__(self, subscribe: consume_wire.Subscribe, make: MakeMessage[M], owner: Any,
                 now: float) -> None:
        self.subscribe = subscribe
        self.protocol = 1  # what the node's CONSUMING agreed to
        self.heartbeat_s = 1.0  # the node's, from CONSUMING
        self.joined = False  # CONSUMING came
        self.malformed = 0
        self.errors: list[str] = []  # ERROR answers once joined (to ACK or NACK, ...)
        self.arrived: deque[M] = deque()  # deliveries decoded, not yet taken
        self._make = make
        self._owner = owner
        self._rejoining = False  # a CONSUME sent again is on its way
        self._rejoined_at = 0.0  # ... sent then
        self.removed = ""  # the node's word that it let this consumer go for good, if it did
        self._unconfirmed: set[bytes] = set()  # keys whose ACKED is awaited
        self._last_sent = now
        # the node's clock (µs) at the newest delivery that came, and as it was when
        # the node last said it did not know the connection: what it sent until then
        # it forgot (a NACK of one is not sent)
        self._newest_sent_us = 0
        self.forgot_upto_us = 0
        # when a join's endpoint is to be probed if no answer came (None: not now)
        self._router_check_at: float | None = None

    def consume(self, now: float) -> list[bytes]:
        """The CONSUME that joins the group."""
        self._last_sent = now
        if not self.joined:
            self._router_check_at = now + ROUTER_CHECK_AFTER_S
        return consume_wire.encode_consume(self.subscribe)

    @property
    def router_check_at(self) -> float | None:
        """When ``router_check_due`` will say yes (None: not for this join)."""
        return None if self.joined else self._router_check_at

    def router_check_due(self, now: float) -> bool:
        """Whether the shell is to ask now whether a ROUTER answers at the endpoint
        (then ``router_told``): the join is unanswered ROUTER_CHECK_AFTER_S after its
        CONSUME went. Once a join: a consumer that does not wait for its answer (a
        routed consumer's, pzq's ``answered``) asks here at each look."""
        if self.joined or self._router_check_at is None or now < self._router_check_at:
            return False
        self._router_check_at = None
        return True

    # -- frames in -------------------------------------------------------------------

    def refuse_if_removed(self) -> None:
        """ConsumeRefused again, at every receive after the node let this consumer go
        (no frame may come to say it again: the node has dropped the connection's
        consumer)."""
        if self.removed:
            raise ConsumeRefused(self.removed)

    def received(self, frames: list[bytes], now: float) -> Out:
        """Whatever the node sent, at ``now``: deliveries go to ``arrived``; returns
        what to send now (a CONSUME again, ACKs that go after it). Raises
        ConsumeRefused when the node refuses the group before it is joined, or once an
        operator removed it or the key may no longer consume it."""
        self.refuse_if_removed()
        verb = frames[0] if frames else b""
        if verb == consume_wire.BATCH:
            try:
                batch = decode_batch_columns(frames)
            except DecodeError:
                self.malformed += 1
                return NOTHING
            count = len(batch.keys)
            if batch.sent_us > self._newest_sent_us:
                self._newest_sent_us = batch.sent_us
            # each delivery its own dict (a copy of an empty one: the cheapest new dict)
            headers = (map(dict.copy, repeat(NO_HEADERS, count)) if batch.headers is None
                       else [parse_headers(list(found)) if found else {}
                             for found in batch.headers])
            # one part each: its tuple made as the delivery is
            parts = zip(batch.bodies) if batch.parts is None else batch.parts
            self.arrived.extend(deliveries(self._make, zip(
                batch.keys, parts, headers, repeat(batch.sent_us, count),
                repeat(batch.ack_timeout_us, count), repeat(b"", count),
                repeat(self._owner, count), strict=True)))
            return NOTHING
        try:
            message = consume_wire.decode_node_message(frames)
        except DecodeError:
            if verb == consume_wire.CONSUME and not self.joined:
                raise ConsumeRefused(not_a_consume_endpoint(frames)) from None
            self.malformed += 1
            return NOTHING
        if verb == consume_wire.DELIVER:
            if message.sent_us > self._newest_sent_us:
                self._newest_sent_us = message.sent_us
            self.arrived.append(self._make(message.key, message.parts, message.headers or {},
                                           message.sent_us, message.ack_timeout_us, b"",
                                           self._owner))
            return NOTHING
        if not self.joined:
            return self._joining(message, now)
        return self._node_said(message, now)

    def _joining(self, message: consume_wire.NodeMessage, now: float) -> Out:
        if message.verb == consume_wire.CONSUMING:
            self.joined = True
            self.heartbeat_s = message.heartbeat_ms / 1000
            self.protocol = message.protocol
        elif message.verb == consume_wire.ERROR:
            if self._protocol_refused(message.error):
                return [self.consume(now)]
            raise ConsumeRefused(message.error)
        return NOTHING

    def _protocol_refused(self, error: str) -> bool:
        """A node older than the PROTOCOL option refuses it: CONSUME again without."""
        if self.subscribe.protocol == 1 or "option b'PROTOCOL:" not in error:
            return False
        self.subscribe = replace(self.subscribe, protocol=1)
        return True

    def _node_said(self, message: consume_wire.NodeMessage, now: float) -> Out:
        verb = message.verb
        if verb == consume_wire.ERROR:
            return self._refused(message.error, now)
        if verb == consume_wire.REFUSED:
            return self._rejoin(message.keys, now)
        if verb == consume_wire.CONSUMING:
            self._rejoining = False
            self.protocol = message.protocol
        elif verb == consume_wire.ACKED:
            self._unconfirmed.difference_update(message.keys)
        return NOTHING

    def _refused(self, error: str, now: float) -> Out:
        """Keep the node's complaint; join again when it does not know this
        connection. A refused ACK is followed by its keys (REFUSED), which go with
        the CONSUME: that one waits for them."""
        self.errors.append(error)
        if error.startswith(FORBIDDEN) or (error.startswith("group ")
                                           and error.endswith(REMOVED)):
            # not joined again: its CONSUME would make the group anew, from its start,
            # or be refused as this key's
            self.removed = error
            self.arrived.clear()  # the node gave them back (or removed them): not to take
            raise ConsumeRefused(error)
        if not error.endswith(NOT_CONSUMING):
            self._rejoining = False  # (a CONSUME sent again may have been refused)
            return NOTHING
        # every delivery before this answer the node forgot: a later one is a join's
        # since (this connection's answers come in order)
        self.forgot_upto_us = self._newest_sent_us
        if not error.startswith("ACK "):
            return self._rejoin((), now)
        return NOTHING

    def _rejoin(self, acked: tuple[bytes, ...], now: float) -> Out:
        """CONSUME again, with the ACKs the node refused (it applies them before it
        delivers anything); once a CONSUME is on its way, ACKs go after it."""
        if self.removed:
            return NOTHING
        # one on its way for two of the node's heartbeat periods was lost (the node
        # killed again before it answered): a node that does not know the connection
        # still, as it says, is asked again, or the consumer would wait for ever
        if self._rejoining and now - self._rejoined_at < REJOIN_AGAIN_PERIODS * self.heartbeat_s:
            return self.ack(list(acked), now) if acked else NOTHING
        self._rejoining = True
        self._rejoined_at = self._last_sent = now
        # a key the node could not read (an ACK of anything) would refuse the CONSUME
        acked = tuple(key for key in acked if MESSAGE_KEY_PATTERN.fullmatch(key))
        return [consume_wire.encode_consume(replace(self.subscribe, acked=acked))]

    def router_told(self, routers: Sequence[tuple[str, bool | None]]) -> None:
        """What the shell's probe (pzq.client.router_probe) found at each endpoint of
        a CONSUME unanswered for ROUTER_CHECK_AFTER_S: ConsumeRefused, before the
        timeout, when one is no ROUTER (a --send-dsn, which never answers)."""
        self._router_check_at = None  # told: not asked again for this join
        if self.joined:
            return
        others = [dsn for dsn, router in routers if router is False]
        if len(routers) == 1 and others:
            raise ConsumeRefused(SEND_ANSWERED)
        if others:
            raise ConsumeRefused(f"{', '.join(others)}: {SEND_ANSWERED}")

    # -- deliveries ----------------------------------------------------------------

    def take(self, most: int) -> list[M]:
        """Up to ``most`` of the deliveries that arrived, in turn."""
        arrived = self.arrived
        if most >= len(arrived):  # the common case: all of them
            taken = list(arrived)
            arrived.clear()
            return taken
        taken = list(islice(arrived, most))
        rest = list(islice(arrived, most, None))
        arrived.clear()
        arrived.extend(rest)
        return taken

    # -- answers: what to send, sent at ``now`` ----------------------------------------

    def ack(self, keys: list[bytes], now: float) -> Out:
        return self._keys(consume_wire.ACK, keys, now)

    def nack(self, keys: list[bytes], now: float, delay: float | None = None) -> Out:
        """Give them back: to go again at once, or after ``delay`` seconds."""
        return self._keys(consume_wire.NACK, keys, now, nack_delay_ms(delay))

    def working(self, keys: list[bytes], now: float) -> Out:
        return self._keys(consume_wire.WORKING, keys, now)

    def reject(self, keys: list[bytes], now: float) -> Out:
        return self._keys(consume_wire.REJECT, keys, now)

    def _keys(self, verb: bytes, keys: list[bytes], now: float, delay_ms: int = 0) -> Out:
        """At most MAX_KEYS keys in one message: more go in several; none, none (and
        nothing sent: the heartbeat stays due)."""
        if not keys:
            return NOTHING
        self._last_sent = now
        most, protocol = consume_wire.MAX_KEYS, self.protocol
        if len(keys) <= most:  # the common case, at every ACK: one message
            return [consume_wire.encode_keys(verb, keys, delay_ms, protocol)]
        return [consume_wire.encode_keys(verb, keys[start:start + most], delay_ms, protocol)
                for start in range(0, len(keys), most)]

    def confirm(self, keys: list[bytes], now: float) -> Out:
        """ACK these and await the node's ACKED for each (``confirm=True``)."""
        if not self.subscribe.confirm:
            raise ValueError("ack_confirmed needs GroupConsumer(..., confirm=True)")
        self._unconfirmed.update(keys)
        return self.ack(keys, now)

    def unconfirmed(self, keys: Iterable[bytes]) -> int:
        """How many of these ACKs the node has not yet confirmed."""
        return len(self._unconfirmed.intersection(keys))

    def forget_unconfirmed(self, keys: Iterable[bytes]) -> None:
        """Await these confirmations no more (the wait gave up)."""
        self._unconfirmed.difference_update(keys)

    def bye(self) -> list[bytes]:
        """Going away: the node gives back what is unacked, at once."""
        return [consume_wire.BYE]

    # -- time ----------------------------------------------------------------------

    def heartbeat(self, now: float) -> list[bytes]:
        self._last_sent = now
        return [consume_wire.HEARTBEAT]

    def wake(self, now: float) -> Out:
        """What time asks for at ``now``: a HEARTBEAT once a period passed with
        nothing sent."""
        if now - self._last_sent >= self.heartbeat_s:
            return [self.heartbeat(now)]
        return NOTHING

    def next_deadline(self, now: float) -> float:
        """When ``wake`` has something to send (nothing sent meanwhile)."""
        return self._last_sent + self.heartbeat_s


def unconfirmed_error(count: int, timeout: float, why: str) -> TimeoutError:
    """What ``ack_confirmed`` raises when the node has not confirmed ``count`` ACKs
    within ``timeout`` s: with what a probe finds at the endpoint (``why``), as a
    join's timeout says it."""
    acks = "1 ACK" if count == 1 else f"{count} ACKs"
    return TimeoutError(f"{acks} not confirmed within {timeout:g} s: {why}")


def nack_delay_ms(delay: float | None) -> int:
    """A NACK's delay in ms, or ValueError for one the node refuses (below 0, beyond a
    week, not a number, a bool): the node answered such a NACK with an ERROR the consumer does
    not read, and the message stayed out at the consumer until its ack deadline."""
    if delay is None:
        return 0
    most_s = consume_wire.MAX_DELAY_MS // 1000
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) \
            or not 0 <= delay <= most_s:  # (True is no number of seconds, as for a priority)
        raise ValueError(f"delay must be from 0 to {most_s} s (a week), got {delay!r}")
    return round(delay * 1000)
