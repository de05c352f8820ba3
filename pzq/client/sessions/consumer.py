"""The session of a consumer on ``--send-dsn``: the original pzq's delivery frames in,
its ACK frames out (pzq.protocol.frames). Nothing is timed: the node's ack deadlines
bound everything, and the original protocol has no other verb."""

from __future__ import annotations

from typing import Any, Generic

from pzq.client.sessions.delivered import M, MakeMessage
from pzq.errors import DecodeError
from pzq.protocol.frames import decode_delivery, encode_consumer_ack


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
        """The ACK (``ok``) or the give-back of a delivery, to its node."""
        return encode_consumer_ack(message.peer, message.key, ok)

    def next_deadline(self, now: float) -> float | None:
        """Nothing is timed: None."""
        return None
