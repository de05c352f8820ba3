"""Where a partitioned topic's partitions live: computed alike on every node, no election.

A partition's candidates are the cluster's nodes (each named by its cluster endpoint,
the ``--broadcast-dsn`` it pings with and the others list in ``--nodes``) in the order
of rendezvous hashing: each node's score is a hash of topic, partition and endpoint,
the highest first. The *owner* is the first candidate this node counts as alive, so
every node that hears the same peers names the same owner, and the loss of a node
moves only its own partitions, each to its next candidate. A node takes a partition
past a dead candidate only while it hears a majority (as a takeover does): one cut off
keeps the partitions it ranks first and names the first candidate for the others.

A message's partition is the CRC-32 (IEEE, as zlib computes it) of its ``KEY:``
header's bytes modulo the topic's partition count, so any client can compute it
(``pzq.protocol.headers.partition_of``, beside the header).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from pzq.cluster.peers import PeerTable

MOST_PARTITIONS = 4096
KEPT_TABLES = 1024  # owner tables kept (per topic and view of the peers), then begun again


def ranking(topic: str, partition: int, endpoints: Iterable[str]) -> list[str]:
    """The partition's candidates, best first."""
    def score(endpoint: str) -> bytes:
        name = f"{topic}\0{partition}\0{endpoint}".encode()
        return hashlib.blake2b(name, digest_size=8).digest()
    return sorted(endpoints, key=score, reverse=True)


View = tuple[str, ...] | None  # the peers counted alive; None: no view (the first candidates)


class Placement:
    """Owners as this node sees them: itself (``own``) and its peers' liveness. Asked
    for every message of a partitioned topic, so each topic's owners are kept per view
    of the peers and computed again only when that view changes."""

    def __init__(self, own: str, peers: PeerTable | None) -> None:
        self.own = own
        self.peers = peers
        self.endpoints = (own, *(peers.peers if peers is not None else ()))
        self._tables: dict[tuple[str, int, View], list[str]] = {}

    def _view(self, now: float) -> View:
        peers = self.peers
        if peers is None or peers.in_grace(now) or not peers.quorum():
            return None  # just started, or cut off from the majority
        return tuple(peer.endpoint for peer in peers.peers.values() if peer.up)

    def owners(self, topic: str, partitions: int, now: float) -> list[str]:
        """Each partition's owner, partition 0 first."""
        view = self._view(now)
        table = self._tables.get((topic, partitions, view))
        if table is None:
            if len(self._tables) >= KEPT_TABLES:
                self._tables.clear()
            alive = None if view is None else {self.own, *view}
            table = [self._first(ranking(topic, partition, self.endpoints), alive)
                     for partition in range(partitions)]
            self._tables[(topic, partitions, view)] = table
        return table

    @staticmethod
    def _first(candidates: list[str], alive: set[str] | None) -> str:
        if alive is None:
            return candidates[0]
        return next(endpoint for endpoint in candidates if endpoint in alive)

    def owner(self, topic: str, partitions: int, partition: int, now: float) -> str:
        return self.owners(topic, partitions, now)[partition]

    def owned(self, topic: str, partitions: int, now: float) -> list[int]:
        return [partition for partition, owner in enumerate(self.owners(topic, partitions, now))
                if owner == self.own]
