"""The node's configuration: one frozen object, validated once (pzq.node.options builds
it from CLI > config file > defaults). Every duration is in microseconds, with the
unit in its name, converted once when the options are read; the views each part takes
convert again where a part works in another unit (its socket's, its clock's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pzq.archive.tier.tier import ArchiveSettings
from pzq.cluster.placement import MOST_PARTITIONS
from pzq.cluster.settings import ClusterSettings
from pzq.delivery.settings import DeliverySettings
from pzq.errors import ConfigError
from pzq.node.intake_model import IntakeLimits
from pzq.protocol.headers import validate_topic
from pzq.protocol.produce_batches import FRAME_ROOM
from pzq.sockets import MAX_FRAME_SIZE

NAMED_NODE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)=(\w+://.+)$")
US_PER_MS = 1000
US_PER_HOUR = 3_600_000_000


@dataclass(frozen=True)
class Config:
    """Validated settings of one node. Times are integer microseconds, as on the wire."""

    database: str
    ack_timeout_us: int
    reaper_period_us: int
    hard_sync: bool
    sync_interval_us: int
    inflight_size: int
    consume_heartbeat_us: int
    prefetch: int
    delivery_headers: bool
    max_message_size: int
    max_frame_size: int
    batch_size: int
    max_deliveries: int
    dedup_window_us: int
    max_age_us: int
    on_expire: str
    send_priorities: bool
    max_messages: int
    max_bytes: int
    archive_dir: str | None
    segment_size: int
    flush_messages: int
    flush_interval_us: int
    retain_us: int
    archive_topic: str
    retain_bytes: int
    relay_poll_us: int
    replay_rate: int
    curve_secret_key: str | None
    curve_authorized_keys: str | None
    cluster_authorized_keys: str | None
    authorization: str | None  # the rules' file (pzq.authorization)
    log_level: str
    log_format: str
    replicas: int
    nodes: tuple[str, ...]
    timeout_nodes_us: int
    timeout_replication_us: int
    partitions: str
    shards: int
    # the endpoints that are on, by their role (pzq.node.endpoints): role -> endpoint
    endpoints: Mapping[str, str]

    # -- the views each part of the node takes, so no part needs the whole config

    @property
    def broadcast_dsn(self) -> str | None:
        """This node's cluster endpoint (None: a node without a cluster)."""
        return self.endpoints.get("cluster")

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
        return DeliverySettings(self.ack_timeout_us, self.inflight_size, self.max_deliveries,
                                self.delivery_headers)

    @property
    def cluster(self) -> ClusterSettings | None:
        """The cluster's settings, in its clock's seconds (None: no --broadcast-dsn)."""
        if self.broadcast_dsn is None:
            return None
        return ClusterSettings(self.broadcast_dsn, self.peer_endpoints, self.replicas,
                               self.timeout_nodes_us / 1e6, self.timeout_replication_us / 1e6,
                               self.frame_limit)

    @property
    def archive(self) -> ArchiveSettings | None:
        """The archive's settings, in its units (None: no --archive-dir)."""
        if self.archive_dir is None:
            return None
        return ArchiveSettings(Path(self.archive_dir), self.segment_size, self.flush_messages,
                               self.flush_interval_us // US_PER_MS,
                               self.retain_us // US_PER_HOUR, self.archive_topic,
                               self.hard_sync, self.retain_bytes)

    @property
    def frame_limit(self) -> int:
        """The longest frame the producer endpoints read: --max-frame-size, or when 0
        the larger of MAX_FRAME_SIZE and --max-message-size with FRAME_ROOM."""
        return self.max_frame_size or max(MAX_FRAME_SIZE, self.max_message_size + FRAME_ROOM)

    @property
    def intake(self) -> IntakeLimits:
        return IntakeLimits(self.batch_size, self.max_message_size, self.max_messages,
                            self.max_bytes, self.dedup_window_us)

    @property
    def sync_interval_s(self) -> float:
        """--sync-interval in the store's clock's seconds."""
        return self.sync_interval_us / 1e6

    @property
    def consume_heartbeat_ms(self) -> int:
        """--consume-heartbeat in ZeroMQ's heartbeat milliseconds."""
        return self.consume_heartbeat_us // US_PER_MS

    @property
    def consume_heartbeat_s(self) -> float:
        """--consume-heartbeat in the loop's monotonic seconds (consumers' liveness)."""
        return self.consume_heartbeat_us / 1e6


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
        name = name.strip()
        if name in found:  # not the last one silently: the count is kept for good
            raise ConfigError(f"--partitions names the topic {name} twice ({name}="
                              f"{found[name]}, {entry}): give it one count")
        found[name] = int(count)
    return found


def split_node(entry: str) -> tuple[str | None, str]:
    """``NAME=ENDPOINT`` or ``ENDPOINT`` from --nodes, as (name or None, endpoint)."""
    named = NAMED_NODE.match(entry)
    return (named[1], named[2]) if named else (None, entry)
