"""Who a node restored from a backup still tells RESTORED (the seqs it lost): each
reachable peer of protocol 5 or later with every heartbeat, until it confirms those
ranges (RESTORED_KEPT, protocol 6): it keeps them on disk from then on. A peer of
protocol 5 never confirms and is told with every heartbeat; an earlier one cannot
read the frame, said once.

Confirmations are kept in memory only: after its own restart the node tells every
peer again, and a peer that kept the ranges (or holds no copy in them) confirms at
once, writing nothing; a frame and its answer a peer for each start. The ranges
never change while the node runs (a new restore is a new start), so a confirmation
is of the current ranges or of none.
"""

from __future__ import annotations

from collections import Counter

from pzq.cluster.peers import PeerTable
from pzq.cluster.protocols import PeerProtocols
from pzq.logs import get_logger
from pzq.protocol.routing import CLUSTER_PROTOCOL

log = get_logger("pzq.cluster")

RESTORED_PROTOCOL = 5  # the first protocol with RESTORED
Ranges = list[tuple[int, int]]


class RestoredTelling:
    def __init__(self, lost_seqs: Ranges) -> None:
        self.lost_seqs = lost_seqs
        self.confirmed: set[str] = set()  # peers that keep the ranges (RESTORED_KEPT)
        self.sent: Counter[str] = Counter()  # RESTORED frames, by peer
        self._untold: set[str] = set()  # peers too old to be told, said once each

    def due(self, peers: PeerTable, protocols: PeerProtocols) -> list[str]:
        """The reachable peers to tell with this heartbeat (counted as sent)."""
        if not self.lost_seqs:
            return []
        due = []
        for peer in peers.reachable_peers():
            protocol = protocols.spoken.get(peer.endpoint)
            if protocol is None or peer.endpoint in self.confirmed:
                continue  # (its ROUTING comes first)
            if protocol >= RESTORED_PROTOCOL:
                due.append(peer.endpoint)
                self.sent[peer.endpoint] += 1
            elif peer.endpoint not in self._untold:
                self._untold.add(peer.endpoint)
                log.warning("restored_seqs_untold", peer=peer.endpoint,
                            peer_protocol=protocol, protocol=CLUSTER_PROTOCOL,
                            lost_seqs=self.lost_seqs)
        return due

    def kept(self, endpoint: str, ranges: Ranges) -> None:
        """A peer said it keeps ``ranges`` (RESTORED_KEPT): not told again if they are
        this node's."""
        if ranges == self.lost_seqs and endpoint not in self.confirmed:
            self.confirmed.add(endpoint)
            log.info("restored_seqs_confirmed", peer=endpoint, lost_seqs=ranges,
                     restored_sent=self.sent[endpoint])

    def figures(self, endpoint: str) -> dict[str, object]:
        """A peer's figures in STATS (confirmed: None from a node never restored)."""
        return {"restored_sent": self.sent[endpoint],
                "restored_confirmed": (endpoint in self.confirmed if self.lost_seqs
                                       else None)}
