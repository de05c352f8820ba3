"""What a node's cluster part is given: its own endpoint, its peers, how many copies a
producer ACK waits for, and its two timeouts (seconds, the cluster's clock)."""

from __future__ import annotations

from dataclasses import dataclass

from pzq.sockets import MAX_FRAME_SIZE


@dataclass(frozen=True)
class ClusterSettings:
    broadcast_dsn: str
    nodes: tuple[str, ...]
    replicas: int
    timeout_nodes_s: float  # silence after which a peer is down (--timeout-nodes)
    timeout_replication_s: float  # how long a producer ACK waits for copies
    max_frame_size: int = MAX_FRAME_SIZE  # longest frame its endpoint reads (--max-frame-size)
