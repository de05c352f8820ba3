"""The node's configuration: one frozen object built from CLI > config file > defaults.

Every option is declared once in OPTIONS; the argument parser, the config file
reader and the validation are all driven by that table, so an option cannot be
known to one of them and unknown to another.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq.archive.tier import ArchiveSettings
from pzq.cluster.placement import MOST_PARTITIONS
from pzq.cluster.settings import ClusterSettings
from pzq.delivery.settings import DeliverySettings
from pzq.durations import DurationError, duration_us
from pzq.errors import ConfigError
from pzq.node.intake import IntakeLimits
from pzq.protocol.headers import validate_topic

DSN_PATTERN = re.compile(r"^(tcp|ipc|inproc|ws|wss|tipc|vmci|pgm|epgm)://.+$")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("console", "json")
NAMED_NODE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)=(\w+://.+)$")


@dataclass(frozen=True)
class Option:
    """One daemon option: its flag, type, default and the words of its --help."""

    name: str  # attribute name in Config and key in the config file
    flag: str  # the command-line flag, kept as the original pzq spelled it
    kind: Callable[[str], Any] | type
    default: Any
    help: str
    aliases: tuple[str, ...] = ()


DURATION = " (microseconds, or with a unit: 250ms, 5s, 2m, 1h)"


def _dsn_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


OPTIONS: tuple[Option, ...] = (
    Option("database", "--database", str, "pzq-data",
           "LevelDB directory holding this node's messages (created if missing)"),
    Option("ack_timeout", "--ack-timeout", duration_us, 5_000_000,
           "how long to wait for a consumer ACK before delivering again" + DURATION),
    Option("reaper_frequency", "--reaper-frequency", duration_us, 2_500_000,
           "how often expired deliveries are collected" + DURATION),
    Option("hard_sync", "--hard-sync", bool, False,
           "fsync every batch before ACKing producers (survives power loss)"),
    Option("sync_interval", "--sync-interval", duration_us, 1_000_000,
           "without --hard-sync, fsync the store's log at least this often, so a power "
           "cut loses at most about this much (0: no timed sync, as LevelDB's 32 MiB write "
           "buffer alone bounds the loss)" + DURATION),
    Option("inflight_size", "--inflight-size", int, 31_457_280,
           "maximum bytes of messages in flight; beyond it the least recently "
           "sent delivery is evicted and delivered again"),
    Option("receive_dsn", "--receive-dsn", str, "tcp://*:11131",
           "endpoint producers connect to"),
    Option("send_dsn", "--send-dsn", str, "tcp://*:11132",
           "endpoint consumers connect to"),
    Option("monitor_dsn", "--monitor-dsn", str, "ipc:///tmp/pzq-monitor",
           "endpoint answering MONITOR, STATS and PING"),
    Option("consume_dsn", "--consume-dsn", str, None,
           "endpoint of consumer groups: topics, groups, credits (off when unset)"),
    Option("consume_heartbeat", "--consume-heartbeat", duration_us, 1_000_000,
           "ZeroMQ heartbeat period on --consume-dsn; a connection silent for three is cut"
           + DURATION),
    Option("prefetch", "--prefetch", int, 1000,
           "most deliveries unacked at once on --send-dsn; below it the node keeps "
           "each delivery's wait for a consumer well inside --ack-timeout"),
    Option("delivery_headers", "--delivery-headers", bool, False,
           "send the delivery count (DELIVERY:n) and the producer's header frames "
           "before the empty frame of every delivery (off: the original pzq's layout)"),
    Option("max_message_size", "--max-message-size", int, 16 * 1024 * 1024,
           "largest accepted message body in bytes (all parts together)"),
    Option("batch_size", "--batch-size", int, 4096,
           "most producer messages and consumer ACKs taken in one wake of the loop"),
    Option("max_deliveries", "--max-deliveries", int, 0,
           "deliveries without an ACK after which a message moves to the dead letters "
           "(0: no limit)"),
    Option("dedup_window", "--dedup-window", duration_us, 120_000_000,
           "how long a topic remembers a producer's DEDUP-ID, storing a repeat once "
           "(a topic's own dedup_window overrides it)" + DURATION),
    Option("max_messages", "--max-messages", int, 0,
           "stored messages beyond which producers get QUEUE_FULL (0: no limit)"),
    Option("max_bytes", "--max-bytes", int, 0,
           "stored bytes beyond which producers get QUEUE_FULL (0: no limit)"),
    Option("archive_dir", "--archive-dir", str, None,
           "archive every acked message to a ZPER segment log here (off when unset)"),
    Option("segment_size", "--segment-size", int, 536_870_912,
           "archive: roll to a new segment file past this many bytes"),
    Option("flush_messages", "--flush-messages", int, 10_000,
           "archive: fsync after this many messages"),
    Option("flush_interval", "--flush-interval", int, 1000,
           "archive: fsync at least this often when something is unsynced (milliseconds)"),
    Option("retain_hours", "--retain-hours", int, 168,
           "archive: delete whole segments older than this"),
    Option("archive_topic", "--archive-topic", str, "default",
           "archive: topic of messages without a TOPIC:name header"),
    Option("archive_dsn", "--archive-dsn", str, None,
           "archive: endpoint of the ZPER-compatible reader (off when unset)"),
    Option("retain_bytes", "--retain-bytes", int, 0,
           "archive: per topic, delete the oldest whole segments while the topic is "
           "larger than this many bytes (0: no limit)"),
    Option("zper_writer_dsn", "--zper-writer-dsn", str, None,
           "archive: endpoint of the ZPER writer, where ZPER producers write (off when unset)"),
    Option("zper_ack_dsn", "--zper-ack-dsn", str, None,
           "archive: endpoint publishing ZPER acks after each flush (off when unset)"),
    Option("zper_relay_dsn", "--zper-relay-dsn", str, None,
           "archive: endpoint of the ZPER relay, pushing new records (off when unset)"),
    Option("relay_poll", "--relay-poll", int, 1000,
           "archive: how often the relay looks for new records (milliseconds)"),
    Option("curve_secret_key", "--curve-secret-key", str, None,
           "this node's CURVE key pair (a .key_secret file): encrypt every socket"),
    Option("curve_authorized_keys", "--curve-authorized-keys", str, None,
           "directory of public keys allowed to connect (needed with --curve-secret-key)"),
    Option("cluster_authorized_keys", "--cluster-authorized-keys", str, None,
           "directory of the other nodes' public keys, NAME.key for each NAME=ENDPOINT "
           "in --nodes: each node its own key pair, and only these keys join the cluster"),
    Option("log_level", "--log-level", str, "info", "one of " + ", ".join(LOG_LEVELS)),
    Option("log_format", "--log-format", str, "console", "one of " + ", ".join(LOG_FORMATS)),
    Option("replicas", "--replicas", int, 0,
           "peers that must hold a copy before a producer is ACKed"),
    Option("nodes", "--nodes", _dsn_list, (),
           "cluster endpoints of the other nodes, separated by ','; NAME=ENDPOINT "
           "names a node's key NAME.key in --cluster-authorized-keys"),
    Option("timeout_nodes", "--timeout-nodes", duration_us, 10_000_000,
           "silence after which a peer is considered down" + DURATION),
    Option("broadcast_dsn", "--broadcast-dsn", str, None,
           "this node's own cluster endpoint"),
    Option("timeout_replication", "--timeout_replication", duration_us, 100_000,
           "how long to wait for replicas before ACKing with REPLICATION_FAILED" + DURATION,
           aliases=("--timeout-replication",)),
    Option("partitions", "--partitions", str, "",
           "partitioned topics to declare at start, NAME=COUNT separated by ',' "
           "(e.g. orders=16,payments=4; see pzq-ctl topic declare --partitions)"),
    Option("shards", "--shards", int, 1,
           "node processes on this host as one cluster, supervised: shard K stores in "
           "DATABASE/shard-K and adds 10*K to every tcp port (1: this process is the node)"),
)

OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}


@dataclass(frozen=True)
class Config:
    """Validated settings of one node. Times are integer microseconds, as on the wire."""

    database: str
    ack_timeout: int
    reaper_frequency: int
    hard_sync: bool
    sync_interval: int
    inflight_size: int
    receive_dsn: str
    send_dsn: str
    monitor_dsn: str
    consume_dsn: str | None
    consume_heartbeat: int
    prefetch: int
    delivery_headers: bool
    max_message_size: int
    batch_size: int
    max_deliveries: int
    dedup_window: int
    max_messages: int
    max_bytes: int
    archive_dir: str | None
    segment_size: int
    flush_messages: int
    flush_interval: int
    retain_hours: int
    archive_topic: str
    archive_dsn: str | None
    retain_bytes: int
    zper_writer_dsn: str | None
    zper_ack_dsn: str | None
    zper_relay_dsn: str | None
    relay_poll: int
    curve_secret_key: str | None
    curve_authorized_keys: str | None
    cluster_authorized_keys: str | None
    log_level: str
    log_format: str
    replicas: int
    nodes: tuple[str, ...]
    timeout_nodes: int
    broadcast_dsn: str | None
    timeout_replication: int
    partitions: str
    shards: int

    # -- the views each part of the node takes, so no part needs the whole config

    @property
    def partitioned_topics(self) -> dict[str, int]:
        """--partitions as topic -> count (validated when the config is built)."""
        return parse_partitions(self.partitions)

    @property
    def peer_endpoints(self) -> tuple[str, ...]:
        return tuple(split_node(entry)[1] for entry in self.nodes)

    @property
    def peer_key_names(self) -> dict[str, str]:
        """Endpoint -> the name of its key file, for the entries given as NAME=ENDPOINT."""
        named = (split_node(entry) for entry in self.nodes)
        return {endpoint: name for name, endpoint in named if name is not None}

    @property
    def delivery(self) -> DeliverySettings:
        return DeliverySettings(self.ack_timeout, self.inflight_size, self.max_deliveries,
                                self.delivery_headers)

    @property
    def cluster(self) -> ClusterSettings | None:
        if self.broadcast_dsn is None:
            return None
        return ClusterSettings(self.broadcast_dsn, self.peer_endpoints, self.replicas,
                               self.timeout_nodes / 1e6, self.timeout_replication / 1e6)

    @property
    def archive(self) -> ArchiveSettings | None:
        if self.archive_dir is None:
            return None
        return ArchiveSettings(Path(self.archive_dir), self.segment_size, self.flush_messages,
                               self.flush_interval, self.retain_hours, self.archive_topic,
                               self.hard_sync, self.retain_bytes)

    @property
    def intake(self) -> IntakeLimits:
        return IntakeLimits(self.batch_size, self.max_message_size, self.max_messages,
                            self.max_bytes, self.dedup_window)


def defaults() -> dict[str, Any]:
    return {option.name: option.default for option in OPTIONS}


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a TOML config file; keys are option names with '-' or '_'."""
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (TOML is): byte "
                          f"{exc.object[exc.start]:#04x} at position {exc.start}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path} could not be read: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in OPTIONS_BY_NAME:
            raise ConfigError(f"config file {path}: unknown option {key!r}")
        values[name] = _coerce_file_value(path, OPTIONS_BY_NAME[name], value)
    return values


def _coerce_file_value(path: Path, option: Option, value: Any) -> Any:
    """Accept the TOML type that matches the option (a list or a string for nodes)."""
    if option.name == "nodes":
        if isinstance(value, str):
            return _dsn_list(value)
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value)
    elif option.kind is duration_us and isinstance(value, float):
        raise ConfigError(f"config file {path}: {option.name} = {value}: give whole "
                          f'microseconds or a text with a unit, e.g. "{value}s"')
    elif option.kind is duration_us and isinstance(value, (int, str)) \
            and not isinstance(value, bool):
        try:
            return duration_us(str(value))
        except DurationError as exc:
            raise ConfigError(f"config file {path}: {option.name}: {exc}") from None
    elif option.kind is bool and isinstance(value, bool):
        return value
    elif option.kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif option.kind is str and isinstance(value, str):
        return value
    raise ConfigError(f"config file {path}: {option.name} has the wrong type ({value!r})")


def build_config(cli_values: Mapping[str, Any], config_file: Path | None = None) -> Config:
    """Merge defaults < config file < command line, then validate once."""
    values = defaults()
    if config_file is not None:
        values.update(read_config_file(config_file))
    values.update(cli_values)
    config = Config(**values)
    validate(config)
    return config


def validate(config: Config) -> None:
    positive = ("ack_timeout", "reaper_frequency", "consume_heartbeat", "inflight_size",
                "prefetch", "max_message_size",
                "batch_size", "timeout_nodes", "timeout_replication", "segment_size",
                "flush_messages", "flush_interval", "retain_hours", "relay_poll",
                "dedup_window", "shards")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"{OPTIONS_BY_NAME[name].flag} must be greater than 0")
    for name in ("sync_interval", "replicas", "max_deliveries", "max_messages", "max_bytes",
                 "retain_bytes"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{OPTIONS_BY_NAME[name].flag} must be 0 or more")
    if not config.database:
        raise ConfigError("--database must name a directory")
    for name in ("receive_dsn", "send_dsn", "monitor_dsn", "consume_dsn"):
        _check_dsn(OPTIONS_BY_NAME[name].flag, getattr(config, name))
    if config.log_level not in LOG_LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}")
    if config.log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
    _validate_cluster(config)
    _validate_archive(config)
    parse_partitions(config.partitions)
    if (config.curve_secret_key is None) != (config.curve_authorized_keys is None):
        raise ConfigError("--curve-secret-key and --curve-authorized-keys go together")


def parse_partitions(text: str) -> dict[str, int]:
    """``orders=16,payments=4`` as {topic: count}; ConfigError for anything else."""
    found: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, equals, count = entry.partition("=")
        try:
            validate_topic(name.strip())
        except ValueError as exc:
            raise ConfigError(f"--partitions {entry}: {exc}") from None
        if not equals or not count.strip().isdigit() \
                or not 1 <= int(count) <= MOST_PARTITIONS:
            raise ConfigError(f"--partitions {entry}: give NAME=COUNT, COUNT from 1 to "
                              f"{MOST_PARTITIONS}")
        found[name.strip()] = int(count)
    return found


def split_node(entry: str) -> tuple[str | None, str]:
    """``NAME=ENDPOINT`` or ``ENDPOINT`` from --nodes, as (name or None, endpoint)."""
    named = NAMED_NODE.match(entry)
    return (named[1], named[2]) if named else (None, entry)


def _validate_cluster(config: Config) -> None:
    endpoints = config.peer_endpoints
    for node in endpoints:
        _check_dsn("--nodes", node)
    if config.broadcast_dsn is not None:
        _check_dsn("--broadcast-dsn", config.broadcast_dsn)
        if config.broadcast_dsn in endpoints:
            raise ConfigError("--nodes must list the other nodes, not this node's --broadcast-dsn")
    if len(set(endpoints)) != len(endpoints):
        raise ConfigError("--nodes lists the same endpoint twice")
    if config.shards > 1:
        _validate_shards_cluster(config)
        return  # the other shards are peers too: each shard's own settings are checked
    if config.replicas > len(endpoints):
        raise ConfigError(
            f"--replicas {config.replicas} needs at least that many --nodes "
            f"(got {len(endpoints)})")
    if endpoints and config.broadcast_dsn is None:
        raise ConfigError("--nodes needs --broadcast-dsn, this node's own cluster endpoint")
    _validate_cluster_keys(config)


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


def _validate_archive(config: Config) -> None:
    try:
        validate_topic(config.archive_topic)
    except ValueError as exc:
        raise ConfigError(f"--archive-topic: {exc}") from None
    for name in ("archive_dsn", "zper_writer_dsn", "zper_ack_dsn", "zper_relay_dsn"):
        dsn, flag = getattr(config, name), OPTIONS_BY_NAME[name].flag
        if dsn is not None:
            _check_dsn(flag, dsn)
            if config.archive_dir is None:
                raise ConfigError(f"{flag} needs --archive-dir")


def _check_dsn(flag: str, dsn: str | None) -> None:
    """An endpoint, when set (optional endpoints are None when off)."""
    if dsn is None:
        return
    if not DSN_PATTERN.match(dsn):
        raise ConfigError(f"{flag} {dsn!r} is not a ZeroMQ endpoint such as tcp://*:11131")
    if dsn.startswith("tcp://") and not _tcp_port_in_range(dsn):
        raise ConfigError(f"{flag} {dsn!r} needs a port from 1 to 65535, or * for any "
                          "free port, e.g. tcp://*:11131")


def _tcp_port_in_range(dsn: str) -> bool:
    # ZeroMQ takes a port modulo 65536 (99999 binds 34463): check it before it wraps.
    port = dsn.rpartition(":")[2]
    return port == "*" or (port.isdigit() and 0 < int(port) < 65536)


def as_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)
