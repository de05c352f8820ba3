"""A stored record as one delivery in --send-dsn's frames: the original pzq's, with the
delivery count and the producer's headers when the operator opts in."""

from __future__ import annotations

from collections.abc import Callable

from pzq.protocol import frames
from pzq.store import record

SendFrames = Callable[[list[bytes]], bool]  # False: no consumer can take it now


def delivery_frames(key: bytes, value: bytes, deliveries: int, sent_us: int,
                    ack_timeout_us: int, with_headers: bool) -> list[bytes]:
    """A stored record as one delivery in --send-dsn's frames (--delivery-headers:
    ``with_headers``)."""
    stored = record.decode(value)
    headers = frames.delivery_headers(deliveries, stored.headers) if with_headers else ()
    return frames.encode_delivery(key, sent_us, ack_timeout_us, stored.parts, headers)
