"""The session of a consumer on ``--send-dsn``: the original pzq's delivery frames in,
its ACK frames out (pzq.protocol.frames). Nothing is timed: the node's ack deadlines
bound everything, and the original protocol has no other verb."""

from __future__ import annotations

from typing import Any, Generic

from pzq.client.sessions.delivered import M, MakeMessage, own_key
from pzq.errors import DecodeError
from pzq.protocol.frames import decode_delivery, encode_consumer_ack

GROUP_ONLY = ("{verb} is a group consumer's (--consume-dsn): the original protocol of "
              "--send-dsn has ACK and give back only")


def group_only(verb: str) -> ValueError:
    """The error for an answer the original protocol does not have (``working()``,
    ``reject()``, a NACK with a delay), raised before anything is sent."""
    return ValueError(GROUP_ONLY.format(verb=verb))


class ConsumerSession(Generic[M]):
    """Deliveries made with ``make`` for ``owner`` (the shell); frames that are not
    one are counted in ``malformed`` and dropped."""

    def __init__(self, make: MakeMessage[M], owner: Any) -> None:
        self.malformed = 0
        self._make = make
        self._owner = owner

    def received(self, frames: list[bytes]) -> M | None:
        """What the consumer's ROUTER received (the node's routing id first)."""
        try:
            delivery = decode_delivery(frames)
        except DecodeError:
            self.malformed += 1
            return None
        return self._make(delivery.key, delivery.parts, delivery.headers, delivery.sent_us,
                          delivery.ack_timeout_us, delivery.peer, self._owner)

    def answer(self, message: M, ok: bool) -> list[bytes]:
        """The ACK (``ok``) or the give-back of a delivery, to its node; ValueError for
        a delivery another consumer received (pzq.client.sessions.delivered.own_key)."""
        own_key(message, self._owner)
        return encode_consumer_ack(message.peer, message.key, ok)

    def give_back(self, message: M, delay: float | None) -> list[bytes]:
        """The give-back of a delivery; ValueError for a ``delay`` (the original
        protocol has none)."""
        if delay is not None:
            raise group_only("a NACK with a delay")
        return self.answer(message, False)

    def next_deadline(self, now: float) -> float | None:
        """Nothing is timed: None."""
        return None
