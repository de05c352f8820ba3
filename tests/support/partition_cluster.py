"""A cluster of real pzq daemons whose links run through fault-injecting proxies.

Node ``i`` binds its cluster ROUTER at a free loopback port and lists, in --nodes,
the proxy ``i>j`` for every peer ``j``: its DEALER to ``j`` goes through that proxy,
and so do ``j``'s answers to it. Faults are named by the traffic they stop:
``cut(a, b)`` silences both directions between two nodes, ``cut_one_way(a, b)``
only what ``a`` sends to ``b`` (its requests to ``b`` and its answers to ``b``'s
requests), ``isolate`` and ``split`` are cuts between groups. Producer, consumer
and monitor endpoints are not proxied: clients keep reaching every live node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any

from tests.support.faultproxy import DOWN, UP, ProxyNetwork
from tests.support.harness import NodeProcess, wait_until
from tests.support.ports import port_below_ephemeral


@dataclass(frozen=True)
class ClusterTimings:
    """The daemons' clocks, in microseconds as their options take them."""

    timeout_nodes_us: int = 2_000_000
    ack_timeout_us: int = 2_000_000
    timeout_replication_us: int = 500_000
    reaper_frequency_us: int = 100_000
    prefetch: int | None = None  # --prefetch; the daemon's default when None

    def args(self) -> list[str]:
        args = ["--timeout-nodes", str(self.timeout_nodes_us),
                "--ack-timeout", str(self.ack_timeout_us),
                "--timeout_replication", str(self.timeout_replication_us),
                "--reaper-frequency", str(self.reaper_frequency_us)]
        if self.prefetch is not None:
            args += ["--prefetch", str(self.prefetch)]
        return args


class LoggedNode(NodeProcess):
    """A daemon whose log survives its restarts (each start begins a fresh one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.earlier_lines: list[str] = []

    def start(self) -> LoggedNode:
        self.earlier_lines += self.stderr_lines
        super().start()
        return self

    def log_lines(self) -> list[str]:
        current: list[str] = self.stderr_lines
        return self.earlier_lines + current


def link(source: int, target: int) -> str:
    """The proxy that carries node ``source``'s connection to node ``target``."""
    return f"{source}>{target}"


class ProxiedCluster:
    def __init__(self, directory: Path, size: int, replicas: int, timings: ClusterTimings,
                 log_level: str = "debug", consume: bool = False,
                 extra_args: tuple[str, ...] = (),
                 own_args: Callable[[int], Sequence[str]] = lambda index: ()) -> None:
        """``extra_args``: more options for every daemon (after the cluster's own);
        ``own_args``: those of the node of that index alone (its archive's directory)."""
        self.size = size
        self.network = ProxyNetwork()
        ports = [port_below_ephemeral() for _ in range(size)]
        self.cluster_endpoints = [f"tcp://127.0.0.1:{port}" for port in ports]
        for source, target in permutations(range(size), 2):
            self.network.add(link(source, target), ports[target])
        for source, target in permutations(range(size), 2):
            # What ``target`` calls ``source``: the proxy it reaches ``source`` through.
            self.network.set_announce(link(source, target),
                                      self.network.proxies[link(target, source)].endpoint)
        self.nodes = [LoggedNode(directory / f"node{index}", *self._args(index, replicas),
                                  *timings.args(), *extra_args, *own_args(index),
                                  log_level=log_level,
                                  consume=consume)
                      for index in range(size)]

    def peer_endpoint(self, observer: int, peer: int) -> str:
        """What node ``observer`` calls node ``peer`` (in --nodes, in STATS)."""
        return self.network.proxies[link(observer, peer)].endpoint

    def _args(self, index: int, replicas: int) -> list[str]:
        peers = [self.network.proxies[link(index, other)].endpoint
                 for other in range(self.size) if other != index]
        return ["--broadcast-dsn", self.cluster_endpoints[index], "--nodes", ",".join(peers),
                "--replicas", str(replicas)]

    # -- life cycle --------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> ProxiedCluster:
        for node in self.nodes:
            node.start()
        self.wait_formed(timeout)
        return self

    def wait_formed(self, timeout: float = 30.0) -> None:
        """Every running node sees every running peer up (and reachable)."""
        wait_until(self._formed, timeout, interval=0.05, message="every peer up on every node")

    def _formed(self) -> bool:
        running = {self.cluster_endpoints[i] for i, n in enumerate(self.nodes) if n.running}
        for index, node in enumerate(self.nodes):
            if not node.running:
                continue
            states = {peer["endpoint"]: peer["state"] for peer in node.stats()["peers"]}
            for other in range(self.size):
                if other == index or self.cluster_endpoints[other] not in running:
                    continue
                if states.get(self.peer_endpoint(index, other)) != "up":
                    return False
        return True

    def close(self) -> None:
        for node in self.nodes:
            if node.running:
                node.kill()
        self.network.close()

    def __enter__(self) -> ProxiedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults ------------------------------------------------------------------------

    def cut(self, a: int, b: int) -> None:
        self.network.blackhole([link(a, b), link(b, a)])

    def cut_one_way(self, source: int, target: int) -> None:
        """Bytes from ``source`` to ``target`` vanish; those the other way flow."""
        self.network.drop([link(source, target)], UP)
        self.network.drop([link(target, source)], DOWN)

    def isolate(self, index: int) -> None:
        self.split([index], self.others(index))

    def split(self, side: Iterable[int], other_side: Iterable[int]) -> None:
        other = list(other_side)
        for a in side:
            for b in other:
                self.cut(a, b)

    def reset(self, a: int, b: int) -> None:
        self.network.reset([link(a, b), link(b, a)])

    def delay(self, a: int, b: int, seconds: float) -> None:
        self.network.delay([link(a, b), link(b, a)], seconds)

    def heal(self) -> None:
        self.network.heal()

    def others(self, index: int) -> list[int]:
        return [other for other in range(self.size) if other != index]

    # -- figures -----------------------------------------------------------------------

    def stats(self, index: int) -> dict[str, Any] | None:
        """STATS of a node, or None while it is not running."""
        node = self.nodes[index]
        if not node.running:
            return None
        try:
            figures: dict[str, Any] = node.stats()
        except (OSError, TimeoutError, RuntimeError):
            return None
        return figures

    def peer_state(self, observer: int, peer: int) -> str | None:
        figures = self.stats(observer)
        if figures is None:
            return None
        endpoint = self.peer_endpoint(observer, peer)
        for entry in figures["peers"]:
            if entry["endpoint"] == endpoint:
                state: str = entry["state"]
                return state
        return None
