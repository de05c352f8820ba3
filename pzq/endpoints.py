"""What declares an endpoint of the node, once: its option, default and help, what it
needs besides, how each shard of ``--shards`` binds it, its name in ``node_ready``,
where its part's figures go in STATS and the exporter's metrics of them.

From the declarations (pzq.node.endpoints) follow the option rows and their checks
(pzq.node.options), each shard's endpoints (pzq.node.shard_layout), the names
node_ready gives the bound endpoints, the STATS sections (pzq.parts.Parts) and the
Prometheus families (pzq.monitoring.endpoint_metrics).

An endpoint the node can do without is a plug-in: its module declares it with its
opener (``PlugIn``), which binds its socket and returns its part, given what the node
lends its plug-ins (a narrow protocol of the module's, which the node's wiring
meets); pzq.node.endpoints lists it in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pzq.parts import Part

# How shard K of ``--shards`` binds the endpoint (pzq.node.shard_layout):
SHARD_PORT = "port"  # tcp port + 10·K, ipc path + "-K"
SHARD_CLUSTER = "cluster"  # the same, from the shards' cluster endpoint when not given


@dataclass(frozen=True)
class Metric:
    """A Prometheus family of one key of the endpoint's STATS section, for each node
    that has the section's top (a node whose endpoint is off gets 0 when another of
    the section's endpoints is on, as ZPER's three share ``zper``)."""

    name: str
    key: str
    help: str
    counter: bool = True  # False: a gauge


@dataclass(frozen=True)
class Endpoint:
    role: str  # what node_ready calls it
    option: str  # the config file's key; the flag is --option with '-' for '_'
    help: str
    default: str | None = None  # None: off unless given
    needs: tuple[str, ...] = ()  # options that must be set with it
    shard: str = SHARD_PORT
    stats: tuple[str, ...] = ()  # where its part's figures go in STATS; (): at the top
    metrics: tuple[Metric, ...] = ()  # families of keys of that section

    @property
    def flag(self) -> str:
        return "--" + self.option.replace("_", "-")


W = TypeVar("W", contravariant=True)  # what the opener is given (the node's wiring meets it)


@dataclass(frozen=True)
class PlugIn(Generic[W]):
    """An endpoint opened only when its option is set: ``open`` binds it at the given
    endpoint and returns its part (pzq.node.registry)."""

    endpoint: Endpoint
    open: Callable[[W, str], Part]
