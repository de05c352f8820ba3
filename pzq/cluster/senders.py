"""Which peer each routing id on the cluster ROUTER belongs to (learnt from PING).

A peer's connection gets a new routing id each time it reconnects. The previous
one is kept for frames still on their way from the old connection; older ones are
forgotten, so the table stays as large as the cluster however often peers reconnect.
"""

from __future__ import annotations

KEPT_PER_PEER = 2  # the current connection's routing id and the one before


class Senders:
    def __init__(self) -> None:
        self._peer: dict[bytes, tuple[str, bytes]] = {}  # routing id -> endpoint, node id
        self._routing_ids: dict[str, list[bytes]] = {}  # endpoint -> oldest first

    def pinged(self, routing_id: bytes, endpoint: str, node_id: bytes) -> None:
        self._peer[routing_id] = (endpoint, node_id)
        routing_ids = self._routing_ids.setdefault(endpoint, [])
        if routing_id in routing_ids:
            routing_ids.remove(routing_id)
        routing_ids.append(routing_id)
        while len(routing_ids) > KEPT_PER_PEER:
            self._peer.pop(routing_ids.pop(0), None)

    def get(self, routing_id: bytes) -> tuple[str, bytes] | None:
        """The endpoint and node id of the peer that sent on ``routing_id``."""
        return self._peer.get(routing_id)

    def __len__(self) -> int:
        return len(self._peer)
