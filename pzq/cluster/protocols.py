"""The cluster protocol each peer speaks, from its ROUTING (pzq.protocol.routing).

A peer of another protocol stays in the cluster: protocol 2 adds only the version
in ROUTING to protocol 1, so each reads all the other sends; protocol 3 adds
SCHEDULE, sent only to peers that announce 3 or later (pzq.cluster.core); protocol 4
adds LEAVING, sent only to peers that announce 4 or later; protocol 5 adds RESTORED,
sent only to peers of 5 or later; protocol 6 adds RESTORED_KEPT, a peer's answer to
RESTORED, sent only to a restored node of 6 or later. A later
protocol that changes a frame will speak its predecessor's frames to a peer that
announces it.
What differs is said once per peer (and again only when the peer's protocol
changes, as when it is upgraded), with both numbers: a peer of a newer protocol
means this node is the one to upgrade, and a frame of it that this node cannot
read is refused and counted in ``cluster_rejected``, as any malformed frame.
"""

from __future__ import annotations

from pzq.logs import get_logger
from pzq.protocol.routing import CLUSTER_PROTOCOL

log = get_logger("pzq.cluster")


class PeerProtocols:
    def __init__(self) -> None:
        self.spoken: dict[str, int] = {}  # peer endpoint -> its protocol, once heard

    def heard(self, endpoint: str, protocol: int) -> None:
        if self.spoken.get(endpoint) == protocol:
            return
        self.spoken[endpoint] = protocol
        if protocol < CLUSTER_PROTOCOL:
            log.warning("peer_protocol_older", peer=endpoint, peer_protocol=protocol,
                        protocol=CLUSTER_PROTOCOL)
        elif protocol > CLUSTER_PROTOCOL:
            log.warning("peer_protocol_newer", peer=endpoint, peer_protocol=protocol,
                        protocol=CLUSTER_PROTOCOL)
