"""The checks of a whole configuration, once its values are each in range
(pzq.node.options): every endpoint an endpoint and what it needs given, the cluster's
peers and keys, the archive's topic, --partitions, CURVE's two options together. A
shard's configuration is checked again with its own endpoints (pzq.node.shard_layout).
"""

from __future__ import annotations

import re
from pathlib import Path

from pzq.errors import ConfigError
from pzq.node.config import Config, parse_partitions
from pzq.node.endpoints import ENDPOINTS
from pzq.protocol.headers import validate_topic
from pzq.protocol.numbers import whole_number
from pzq.protocol.produce_batches import FRAME_ROOM

DSN_PATTERN = re.compile(r"^(tcp|ipc|inproc|ws|wss|tipc|vmci|pgm|epgm)://.+$")


def validate(config: Config) -> None:
    if not config.database:
        raise ConfigError("--database must name a directory")
    if config.archive_dir is not None and (
            Path(config.archive_dir).resolve() == Path(config.database).resolve()):
        raise ConfigError(f"--archive-dir {config.archive_dir} is the --database directory: "
                          "give the archive a directory of its own, not the store's")
    for endpoint in ENDPOINTS:
        dsn = config.endpoints.get(endpoint.role)
        if dsn is None:
            continue
        check_dsn(endpoint.flag, dsn)
        for needed in endpoint.needs:
            if getattr(config, needed) is None:
                raise ConfigError(f"{endpoint.flag} needs --{needed.replace('_', '-')}")
    _validate_cluster(config)
    try:
        validate_topic(config.archive_topic)
    except ValueError as exc:
        raise ConfigError(f"--archive-topic: {exc}") from None
    parse_partitions(config.partitions)
    least_frame = config.max_message_size + FRAME_ROOM
    if config.max_frame_size and config.max_frame_size < least_frame:
        # a body over --max-message-size must still be read to be answered, and a
        # producer's batch fit in one frame
        raise ConfigError(f"--max-frame-size must be at least {least_frame} bytes: "
                          f"--max-message-size ({config.max_message_size} bytes) and "
                          f"{FRAME_ROOM} bytes of room for a produce batch, ids and headers")
    if (config.curve_secret_key is None) != (config.curve_authorized_keys is None):
        raise ConfigError("--curve-secret-key and --curve-authorized-keys go together")


def _validate_cluster(config: Config) -> None:
    endpoints = config.peer_endpoints
    for node in endpoints:
        check_dsn("--nodes", node)
    if config.broadcast_dsn is not None and config.broadcast_dsn in endpoints:
        raise ConfigError(f"--nodes must list the other nodes, not this node's --broadcast-dsn "
                          f"{config.broadcast_dsn}")
    twice = next((node for n, node in enumerate(endpoints) if node in endpoints[:n]), None)
    if twice is not None:  # named: in a list of many nodes, which one is not plain
        raise ConfigError(f"--nodes lists the same endpoint twice: {twice}")
    if config.shards > 1:
        _validate_shards_cluster(config)
        return  # the other shards are peers too: each shard's own settings are checked
    if config.replicas > len(endpoints):
        raise ConfigError(
            f"--replicas {config.replicas} needs at least that many --nodes "
            f"(got {len(endpoints)})")
    if endpoints and config.broadcast_dsn is None:
        raise ConfigError("--nodes needs --broadcast-dsn, this node's own cluster endpoint")
    if endpoints and config.broadcast_dsn is not None:
        _refuse_wildcard_broadcast(config.broadcast_dsn)
    _validate_cluster_keys(config)


WILDCARD_HOSTS = ("*", "0.0.0.0", "[::]")


def _refuse_wildcard_broadcast(dsn: str) -> None:
    # A node names itself to its peers by this text, and they take only the endpoints
    # their --nodes list: with a wildcard they would refuse it as a stranger, and every
    # ACK would say REPLICATION_FAILED while both sides show the other up.
    scheme, _, address = dsn.partition("://")
    host, _, port = address.rpartition(":")
    if (scheme == "tcp" and (host in WILDCARD_HOSTS or port == "*")) or dsn == "ipc://*":
        raise ConfigError(f"--broadcast-dsn {dsn}: the other nodes know this node by its "
                          "--broadcast-dsn, as their --nodes list it: give the host and port "
                          "they connect to, such as tcp://10.0.0.1:11134, not a wildcard")


def _validate_shards_cluster(config: Config) -> None:
    # Per-node cluster keys need a key pair per node; the shards share one.
    if config.cluster_authorized_keys is not None:
        raise ConfigError("--shards cannot take --cluster-authorized-keys: the shards share "
                          "one --curve-secret-key; without --cluster-authorized-keys they "
                          "join with that key pair, whose public key must then be in "
                          "--curve-authorized-keys")


def _validate_cluster_keys(config: Config) -> None:
    names = config.peer_key_names
    if config.cluster_authorized_keys is None:
        if names:
            raise ConfigError("--nodes NAME=ENDPOINT names a key in --cluster-authorized-keys; "
                              "give that directory, or plain endpoints")
        return
    flag = "--cluster-authorized-keys"
    if config.curve_secret_key is None or config.broadcast_dsn is None:
        raise ConfigError(f"{flag} needs --curve-secret-key and --broadcast-dsn")
    if not Path(config.cluster_authorized_keys).is_dir():
        raise ConfigError(f"{flag} {config.cluster_authorized_keys} is not a directory")
    if config.curve_authorized_keys is not None and Path(config.curve_authorized_keys).resolve() \
            == Path(config.cluster_authorized_keys).resolve():
        raise ConfigError(f"{flag} must not be --curve-authorized-keys: every client key "
                          "there could join the cluster")
    unnamed = [endpoint for endpoint in config.peer_endpoints if endpoint not in names]
    if unnamed:
        raise ConfigError(f"with {flag} every --nodes entry is NAME=ENDPOINT, the key "
                          f"being NAME.key there (not named: {', '.join(unnamed)})")


def check_dsn(flag: str, dsn: str) -> None:
    if not DSN_PATTERN.match(dsn):
        raise ConfigError(f"{flag} {dsn!r} is not a ZeroMQ endpoint such as tcp://*:11131")
    if dsn.startswith("tcp://") and not _tcp_port_in_range(dsn):
        raise ConfigError(f"{flag} {dsn!r} needs a port from 1 to 65535, or * for any "
                          "free port, e.g. tcp://*:11131")


def _tcp_port_in_range(dsn: str) -> bool:
    # ZeroMQ takes a port modulo 65536 (99999 binds 34463): check it before it wraps.
    port = dsn.rpartition(":")[2]
    number = whole_number(port, 5)
    return port == "*" or (number is not None and 0 < number < 65536)
