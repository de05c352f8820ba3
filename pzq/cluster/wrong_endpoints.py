"""A ``--nodes`` entry that answers as a producer endpoint, not a cluster one.

The original pzq's ``--nodes`` listed its peers' ``--receive-dsn``: a cluster
command line carried over from it points this node's link at a peer's producer
endpoint, which refuses each cluster frame with a producer's ACK ``0``. The only
sign was ``peer_never_reached`` after ``--timeout-nodes``, and ``REPLICATION_FAILED``
in every ACK, which the original's clients take for a success; so the first such
answer is said at once, once per peer, with what to list instead.
"""

from __future__ import annotations

from pzq.cluster.peers import Peer
from pzq.logs import get_logger

log = get_logger("pzq.cluster")

PRODUCER_ENDPOINT = ("it answers as a producer endpoint (--receive-dsn), with an ACK to "
                     "each cluster frame: --nodes lists the other nodes' --broadcast-dsn, "
                     "their cluster endpoints (the original pzq's --nodes took their "
                     "--receive-dsn)")


def is_producer_ack(frames: list[bytes]) -> bool:
    """A producer ACK's shape: message id, status ``0`` or ``1``, an empty frame."""
    return len(frames) >= 3 and frames[1] in (b"0", b"1") and frames[2] == b""


def answered_as_producer_endpoint(peer: Peer) -> None:
    """Said once per peer: its link's answers stay the same until it is restarted."""
    if peer.not_a_cluster_endpoint:
        return
    peer.not_a_cluster_endpoint = PRODUCER_ENDPOINT
    log.warning("peer_not_a_cluster_endpoint", endpoint=peer.endpoint,
                reason=PRODUCER_ENDPOINT)
