"""A delivered message as every client shell hands it out: its fields here, its
answers (``ack``, ``nack``, ...) on the shell's own ``Message``, which asks the
consumer that received it (``_consumer``).

A session makes each delivery with the shell's class and the shell as its consumer
(``MakeMessage``), in one call a delivery, so a batch of deliveries costs no more
than the objects themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pzq.protocol.frames import delivery_count


@dataclass
class Delivered:
    """One delivery. ``peer``: the node's routing id on ``--send-dsn`` (empty on
    ``--consume-dsn``, whose connection is the consumer's own)."""

    key: bytes
    parts: tuple[bytes, ...]
    headers: dict[str, str]
    sent_us: int
    ack_timeout_us: int
    peer: bytes
    _consumer: Any = field(repr=False)  # the shell that answers for it

    @property
    def deadline_us(self) -> int:
        return self.sent_us + self.ack_timeout_us

    @property
    def deliveries(self) -> int | None:
        """How often this message was delivered; None unless the node runs with
        --delivery-headers (the original layout carries no count)."""
        return delivery_count(self.headers)


M = TypeVar("M", bound=Delivered)
# (key, parts, headers, sent µs, ack timeout µs, peer, consumer) -> the shell's message
MakeMessage = Callable[[bytes, tuple[bytes, ...], dict[str, str], int, int, bytes, Any], M]
