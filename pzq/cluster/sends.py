"""What the cluster's rules want sent (pzq.cluster.core), moved by its sockets
(pzq.cluster.links): a request on our DEALER to a peer, or a reply on our ROUTER."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ToPeer:
    """Frames for a peer's ROUTER, over our DEALER connected to it."""

    endpoint: str
    frames: list[bytes]


@dataclass(frozen=True, slots=True)
class Reply:
    """Frames back to whoever sent a request to our ROUTER."""

    routing_id: bytes
    frames: list[bytes]


Send = ToPeer | Reply
