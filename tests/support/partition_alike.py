"""A proxied cluster whose nodes all call each node by the same name.

Partition owners are ranked by the names of the nodes (``pzq.cluster.placement``), so
every node must call node ``j`` what ``j`` calls itself: pzq enforces this (a PING
names the sender's --broadcast-dsn, which must be in the receiver's --nodes). The
proxies of ``ProxiedCluster`` give every directed pair its own TCP port, hence its
own name, and rewrite the PINGs. Here node ``j`` is ``ipc://node{j}.cluster``
everywhere, a path relative to each node's working directory (its home): node ``j``
binds it in its own home, and in every other node's home a proxy of the pair listens
at that path and forwards to node ``j``'s socket. Nothing in the stream is rewritten.
"""

from __future__ import annotations

import functools
import os
from itertools import permutations
from pathlib import Path

from tests.support.faultproxy import ProxyNetwork
from tests.support.partition_cluster import ClusterTimings, LoggedNode, ProxiedCluster, link


def cluster_name(index: int) -> str:
    return f"node{index}.cluster"


class AlikeCluster(ProxiedCluster):
    def __init__(self, directory: Path, size: int, replicas: int, timings: ClusterTimings,
                 log_level: str = "debug", consume: bool = False) -> None:
        self.size = size
        self.network = ProxyNetwork()
        homes = [directory / f"home{index}" for index in range(size)]
        for home in homes:
            home.mkdir(parents=True, exist_ok=True)
        self.cluster_endpoints = [f"ipc://{cluster_name(index)}" for index in range(size)]
        for source, target in permutations(range(size), 2):
            self.network.add(link(source, target), str(homes[target] / cluster_name(target)),
                             listen=str(homes[source] / cluster_name(target)))
        self.nodes = [LoggedNode(directory / f"node{index}", *self._args(index, replicas),
                                  *timings.args(), log_level=log_level, consume=consume,
                                  preexec_fn=functools.partial(os.chdir, homes[index]))
                      for index in range(size)]

    def peer_endpoint(self, observer: int, peer: int) -> str:
        return self.cluster_endpoints[peer]

    def _args(self, index: int, replicas: int) -> list[str]:
        peers = [self.cluster_endpoints[other] for other in self.others(index)]
        return ["--broadcast-dsn", self.cluster_endpoints[index], "--nodes", ",".join(peers),
                "--replicas", str(replicas)]
