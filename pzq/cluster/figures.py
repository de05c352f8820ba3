"""The cluster's sections of STATS: each peer's state and what is owed to it, copies
and tombstones held, takeovers; and the figures of a node without a cluster."""

from __future__ import annotations

from pzq.cluster.held import PeerHolds
from pzq.cluster.peers import Peer, PeerTable
from pzq.cluster.protocols import PeerProtocols
from pzq.cluster.removes import RemoveLedger
from pzq.cluster.replication import ReplicationTracker
from pzq.store.replicas import ReplicaStore

NO_CLUSTER: dict[str, object] = {"peers": [], "replication_failures": 0, "cluster_rejected": 0,
                                 "replicas_held": 0, "scheduled_copies_held": 0,
                                 "tombstones_held": 0, "takeovers": [], "restored_seqs_kept": {}}


def peer_state(peer: Peer) -> str:
    """up: it talks to us and answers us; unreachable: it talks to us, but our link to
    it gets no answer (so no copies go to it); left: it said LEAVING (stopped by
    SIGTERM) and has not pinged since; down: silent."""
    if peer.up:
        return "up" if peer.reachable else "unreachable"
    return "left" if peer.left else "down"


def peer_figures(peers: PeerTable, replicas: ReplicaStore, tracker: ReplicationTracker,
                 removes: RemoveLedger, holds: PeerHolds, protocols: PeerProtocols,
                 now: float) -> list[dict[str, object]]:
    return [{
        "endpoint": peer.endpoint,
        "node_id": (peer.node_id or b"").decode(),
        "state": peer_state(peer),
        "reachable": peer.reachable,
        "last_heard_seconds": (None if peer.last_heard is None
                               else round(now - peer.last_heard, 3)),
        "replicas_held": replicas.counts[peer.node_id] if peer.node_id else 0,
        "replication_lag": tracker.lag.get(peer.endpoint, 0),
        "removes_owed": removes.owed_to(peer.endpoint),
        "held_there": holds.count(peer.endpoint),
        "protocol": protocols.spoken.get(peer.endpoint),  # None: not heard yet
    } for peer in peers.peers.values()]
