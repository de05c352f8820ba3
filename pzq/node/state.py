"""What a node keeps between wakes, none of it a socket: built and tested in process.

The store and its participants (this node's delivery state, the cluster, the
archive), the delivery window, counters, rates and latencies. The socket side
(pzq.node.device) reads and writes through these.
"""

from __future__ import annotations

from dataclasses import replace

from pzq.archive.archiving import Archiving, NoArchiving
from pzq.archive.tier import ArchiveTier
from pzq.clock import Now
from pzq.cluster.core import ClusterCore
from pzq.cluster.placement import Placement
from pzq.cluster.routes import Routes, advertised, host_of
from pzq.counters import Counters
from pzq.delivery.areas import Area, TakeoverArea
from pzq.delivery.groups import DefaultArea
from pzq.delivery.state import DeliveryState
from pzq.delivery.window import DeliveryWindow
from pzq.errors import ConfigError
from pzq.node.config import Config
from pzq.protocol.topic_reads import DefaultReads, GroupReads
from pzq.rates import LatencyWindow, Rates
from pzq.store.dedup import DedupIndex
from pzq.store.store import Batch, Store
from pzq.store.topics import DEFAULT_GROUP, Topics


def who_reads(topics: Topics) -> DefaultReads:
    """What ``default`` and the named groups read of this node's topics, for the
    peers holding copies (TOPICS)."""
    reads = topics.default_reads()
    groups = {topic.name: tuple(GroupReads(group.name, group.start_seq, group.filter,
                                           group.delivered_below)
                                for group in topic.groups.values())
              for topic in topics.topics.values() if topic.groups}
    return replace(reads, groups=groups) if groups else reads


LONE_NODE = "this-node"  # the route table's name of a node without a cluster


def client_endpoints(config: Config) -> dict[str, str]:
    """Where clients reach this node, by role: a wildcard host becomes the host of the
    cluster endpoint (the one the peers reach), else the loopback address."""
    host = host_of(config.broadcast_dsn) if config.broadcast_dsn else "127.0.0.1"
    given = {"receive": config.receive_dsn, "send": config.send_dsn,
             "consume": config.consume_dsn, "monitor": config.monitor_dsn}
    return {role: advertised(endpoint, host) for role, endpoint in given.items() if endpoint}


class NodeState:
    def __init__(self, config: Config, store: Store, now: Now) -> None:
        self.config = config
        self.store = store
        self.node_id = store.node_id
        self.started = now.mono
        self.counters = Counters()
        self.topics = Topics(store, config.archive_topic)
        store.register(self.topics)  # first: the delivery states' deletes go through it
        self.default_area = DefaultArea(store, self.topics)
        self.delivery = self._delivery_state(self.default_area)
        self.window = DeliveryWindow(config.prefetch, config.ack_timeout, now.wall_us)
        self.rates = Rates(("received", "delivered", "acked"))
        self.rates.sample(now.mono, self.counters)  # the zero every rate starts from
        self.latency = LatencyWindow()
        for name, count in config.partitioned_topics.items():  # --partitions
            try:
                self.topics.partition(self.topics.topic(name, now.wall_us), count)
            except ValueError as exc:
                raise ConfigError(f"--partitions: {exc}") from None
        self.dedup = DedupIndex(store)
        store.register(self.dedup)
        cluster = config.cluster
        clients = client_endpoints(config)
        self.cluster = (ClusterCore(cluster, store, self._delivery_state, now.mono,
                                    self.topics, clients)
                        if cluster is not None else None)
        self.routes = (self.cluster.routes if self.cluster is not None
                       else Routes(Placement(LONE_NODE, None), clients, self.topics))
        if self.cluster is not None:
            self.delivery.held_elsewhere = self.cluster.held_elsewhere
            self.cluster.own_reads = lambda: who_reads(self.topics)
        archive = config.archive
        self.archiving: Archiving | NoArchiving = (Archiving(ArchiveTier(archive))
                                                   if archive is not None else NoArchiving())
        store.register(self.delivery)
        if self.cluster is not None:
            store.register(self.cluster)
        store.register(self.archiving)

    def wake_at(self, now: Now) -> None:
        """The time of the loop's wake, for the store's timed sync (the archive learns it
        as a part of the loop: pzq.archive.part)."""
        self.store.wake_at(now.mono)

    def _delivery_state(self, area: Area) -> DeliveryState:
        # A named group taken over counts its own work (STATS shows it per origin and
        # group), as an own named group does; ``default``'s is the node's.
        named = isinstance(area, TakeoverArea) and area.group != DEFAULT_GROUP
        return DeliveryState(area, self.config.delivery, Counters() if named else self.counters)

    def requeued(self, batch: Batch, seq: int, value: bytes) -> None:
        """A dead letter stored again as a new message: into its topic's log."""
        topic, tag = self.topics.describe(value)
        self.topics.stored(batch, seq, topic, tag, len(value))

    def removed(self, origin: bytes, seq: int, group: str = DEFAULT_GROUP,
                final: bool = True) -> None:
        """A message ``group`` acked (or gave up) here; ``final``: no group holds it
        any more. The cluster tells the other nodes: every holder drops its copy once
        every group is done, and marks it for the group before that."""
        if self.cluster is None:
            return
        if origin != self.node_id:
            self.cluster.removed_taken_over(origin, [seq], group)
        elif final:
            self.cluster.removed_own([seq])
        else:
            self.cluster.done_own(group, [seq])

    def tell_holders(self, batch: Batch, removed: list[int], group: str, done: list[int],
                     mono: float) -> None:
        """An operator deleted own messages (``removed``) or made ``group`` done with
        them (``done``): every holder drops or marks its copies, owed in the operator's
        batch and sent with the next wake."""
        if self.cluster is None:
            return
        self.cluster.tell_reads()  # groups gone: before the removes and dones
        self.cluster.removed_own(removed)
        self.cluster.done_own(group, done)
        self.cluster.owe_removes(batch, mono)
        self.cluster.flush_removes(mono)

    def copy_requeued(self, messages: list[tuple[int, bytes]], mono: float) -> None:
        """Dead letters requeued as new messages: copied to the peers as new messages
        are (no producer waits for the confirmations)."""
        if self.cluster is not None and self.config.replicas and messages:
            self.cluster.replicate_quietly(messages, mono)

    def reap(self, now_us: int) -> int:
        """Taken-over deliveries whose deadline passed back (every group's; each group
        reaps its own), and de-duplication ids past every window let go. Returns how
        many taken-over deliveries expired."""
        expired = self.cluster.takeovers.reap(now_us) if self.cluster is not None else 0
        self.dedup.expire(now_us - self.longest_dedup_window_us())
        return expired

    def longest_dedup_window_us(self) -> int:
        """Ids older than every topic's window are let go."""
        return max([self.config.dedup_window,
                    *(topic.dedup_window_us for topic in self.topics.topics.values())])
