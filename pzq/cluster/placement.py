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
header's bytes modulo the topic's partition count, so any client can compute it.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable

from pzq.cluster.peers import PeerTable

MOST_PARTITIONS = 4096


def partition_of(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


def ranking(topic: str, partition: int, endpoints: Iterable[str]) -> list[str]:
    """The partition's candidates, best first."""
    def score(endpoint: str) -> bytes:
        name = f"{topic}\0{partition}\0{endpoint}".encode()
        return hashlib.blake2b(name, digest_size=8).digest()
    return sorted(endpoints, key=score, reverse=True)


class Placement:
    """Owners as this node sees them: itself (``own``) and its peers' liveness."""

    def __init__(self, own: str, peers: PeerTable | None) -> None:
        self.own = own
        self.peers = peers
        self.endpoints = (own, *(peers.peers if peers is not None else ()))

    def owner(self, topic: str, partition: int, now: float) -> str:
        candidates = ranking(topic, partition, self.endpoints)
        if self.peers is None or self.peers.in_grace(now) or not self.peers.quorum():
            return candidates[0]  # no view of the others: the first, alive or not
        for endpoint in candidates:
            if endpoint == self.own or self.peers.peers[endpoint].up:
                return endpoint
        return self.own  # unreachable: this node is always a live candidate

    def owners(self, topic: str, partitions: int, now: float) -> list[str]:
        return [self.owner(topic, partition, now) for partition in range(partitions)]

    def owned(self, topic: str, partitions: int, now: float) -> list[int]:
        return [partition for partition, owner in enumerate(self.owners(topic, partitions, now))
                if owner == self.own]
