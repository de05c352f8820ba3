"""Where each shard of ``pzq --shards N`` keeps its store and binds its endpoints.

Shard K stores in ``DATABASE/shard-K`` (and archives in ``ARCHIVE_DIR/shard-K``),
adds 10·K to the port of every tcp endpoint and the suffix ``-K`` to every ipc
path. The step is 10, not 1, because the default ports 11131 and 11132 are
adjacent: with +K shard 1's producers would take shard 0's consumer port. The
shards form one cluster: shard K's cluster endpoint is the base one's port + 10·K,
and its --nodes are the other shards' cluster endpoints and the --nodes given.

Only arithmetic and validation live here, so it is tested without processes; the
supervisor (pzq.node.shards) starts the children.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq.endpoints import SHARD_CLUSTER
from pzq.errors import ConfigError
from pzq.node.config import Config
from pzq.node.config_checks import validate
from pzq.node.endpoints import ENDPOINTS
from pzq.node.options import OPTIONS_BY_NAME, with_options

PORT_STEP = 10
FLAGS = {endpoint.role: endpoint.flag for endpoint in ENDPOINTS}
BASE_BROADCAST = "tcp://127.0.0.1:11134"  # the shards' cluster endpoint without --broadcast-dsn


@dataclass(frozen=True)
class Shard:
    """One shard: its number, its validated settings, and the options its command line
    adds to the supervisor's (given last, they win over the same options before them
    and over a --config file)."""

    number: int
    config: Config
    overrides: dict[str, Any]

    def arguments(self) -> list[str]:
        arguments = []
        for name, value in self.overrides.items():
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            arguments += [OPTIONS_BY_NAME[name].flag, text]
        return arguments


def plan_shards(config: Config) -> list[Shard]:
    """Every shard of ``config``, or one ConfigError line saying why they cannot run."""
    base = config.broadcast_dsn or BASE_BROADCAST
    _refuse_unreachable_broadcast(base)
    every = [shard_overrides(config, base, number) for number in range(config.shards)]
    _refuse_shards_in_nodes([overrides["broadcast_dsn"] for overrides in every], config.nodes)
    _refuse_replicas_beyond_peers(config)
    shards = []
    for number, overrides in enumerate(every):
        shard_config = with_options(config, overrides)
        try:
            validate(shard_config)
        except ConfigError as exc:
            raise ConfigError(f"--shards {config.shards}: shard {number}: {exc}") from None
        shards.append(Shard(number, shard_config, overrides))
    _refuse_collisions(shards)
    return shards


def _refuse_replicas_beyond_peers(config: Config) -> None:
    """Said in the shards' terms: a shard's peers are the other shards and the --nodes
    given (a shard's own check would count only --nodes, which the user may not give)."""
    peers = config.shards - 1 + len(config.peer_endpoints)
    if config.replicas > peers:
        raise ConfigError(
            f"--shards {config.shards} --replicas {config.replicas}: a shard's copies go to "
            f"the other shards and the --nodes given, {peers} here: give --replicas "
            f"{peers} at most, or more --shards or --nodes")


def shard_overrides(config: Config, base_broadcast: str, number: int) -> dict[str, Any]:
    """The options whose values differ from shard to shard."""
    overrides: dict[str, Any] = {"database": str(Path(config.database) / f"shard-{number}")}
    if config.archive_dir is not None:  # an archive directory is one node's (it is locked)
        overrides["archive_dir"] = str(Path(config.archive_dir) / f"shard-{number}")
    for endpoint in ENDPOINTS:  # each shard binds its own
        dsn = (base_broadcast if endpoint.shard == SHARD_CLUSTER
               else config.endpoints.get(endpoint.role))
        if dsn is not None:
            overrides[endpoint.option] = shard_endpoint(dsn, number, endpoint.flag)
    others = tuple(shard_endpoint(base_broadcast, other, "--broadcast-dsn")
                   for other in range(config.shards) if other != number)
    overrides["nodes"] = others + config.nodes
    overrides["shards"] = 1  # the child is a node, not another supervisor
    return overrides


def shard_endpoint(dsn: str, number: int, flag: str) -> str:
    """Shard ``number``'s endpoint for ``dsn``: tcp port + 10·K, ipc path + ``-K``."""
    scheme = dsn.partition("://")[0]
    if scheme == "tcp":
        address, _, port = dsn.rpartition(":")
        return dsn if port == "*" else f"{address}:{int(port) + PORT_STEP * number}"
    if scheme == "ipc":
        return dsn if dsn == "ipc://*" else f"{dsn}-{number}"
    if scheme == "inproc":
        return dsn  # inproc names live inside one process: each shard is its own process
    raise ConfigError(f"--shards places tcp:// and ipc:// endpoints only, not {flag} {dsn}")


def _refuse_unreachable_broadcast(base: str) -> None:
    # Each shard connects to the others' cluster endpoints, and knows them by that text.
    host = base.partition("://")[2].rpartition(":")[0]
    if _binding(base) is None or (base.startswith("tcp://") and host == "*"):
        raise ConfigError(f"--shards needs a --broadcast-dsn the shards can connect to, "
                          f"such as {BASE_BROADCAST}, not {base}")


def _refuse_shards_in_nodes(broadcasts: list[str], nodes: tuple[str, ...]) -> None:
    # Said before each shard's own check, which would call it an endpoint listed twice.
    for number, broadcast in enumerate(broadcasts):
        if broadcast in nodes:
            raise ConfigError(f"--nodes {broadcast} is shard {number}'s cluster endpoint: "
                              "--nodes lists the nodes besides the shards")


def _refuse_collisions(shards: list[Shard]) -> None:
    """Endpoints of two shards on one tcp port or one ipc path: refused before any starts."""
    taken: dict[tuple[str, str], tuple[int, str, str]] = {}
    for shard in shards:
        for role, dsn in shard.config.endpoints.items():
            key = _binding(dsn)
            if key is None:
                continue
            flag = FLAGS[role]
            other = taken.setdefault(key, (shard.number, flag, dsn))
            if other[0] != shard.number:
                why = f"; shard K adds {PORT_STEP}*K to every tcp port" if key[0] == "tcp" else ""
                raise ConfigError(
                    f"--shards {len(shards)}: shard {shard.number}'s {flag} {dsn} would bind "
                    f"where shard {other[0]}'s {other[1]} {other[2]} does{why}")


def _binding(dsn: str) -> tuple[str, str] | None:
    """What two binds must not share: a tcp port, or an ipc path (wildcards never clash)."""
    scheme, _, rest = dsn.partition("://")
    if scheme == "tcp":
        port = rest.rpartition(":")[2]
        return None if port == "*" else ("tcp", port)
    if scheme == "ipc" and rest != "*":
        return ("ipc", rest)
    return None

