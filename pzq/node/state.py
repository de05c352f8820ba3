"""What a node keeps between wakes, none of it a socket: built and tested in process.

The store and its participants (this node's delivery state, the cluster, the
archive), what each client key may do, the delivery window, counters, rates and
latencies, the event hub its parts subscribe to (pzq.events) and what the peers
have out of its messages. The socket side (the parts, pzq.node.registry) reads and
writes through these.
"""

from __future__ import annotations

from dataclasses import replace

from pzq.archive.contract import NoArchiving
from pzq.archive.tier.archived_at_start import stored_at_in
from pzq.archive.tier.archiving import Archiving
from pzq.archive.tier.tier import ArchiveTier
from pzq.authorization import Authorization, authorization
from pzq.clock import Now
from pzq.cluster.core import ClusterCore
from pzq.cluster.held import PeerHolds
from pzq.cluster.lone import Cluster, NoCluster
from pzq.cluster.placement import Placement
from pzq.cluster.routes import Routes, advertised, host_of
from pzq.counters import Counters
from pzq.delivery.areas import TakeoverArea
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.expiry import CopyExpiry, MessageExpiry
from pzq.delivery.lanes import Lanes
from pzq.delivery.state import DeliveryState
from pzq.delivery.waits import KeptWaits
from pzq.delivery.window import DeliveryWindow
from pzq.errors import ConfigError
from pzq.events import EventHub
from pzq.node.config import Config
from pzq.node.key_reload import KeyDirectories
from pzq.protocol.topic_reads import DEFAULT_GROUP, DefaultReads, GroupReads
from pzq.rates import LatencyWindow, Rates
from pzq.security import admitted_keys
from pzq.store.batch import Batch
from pzq.store.dedup import DedupIndex
from pzq.store.scheduled import ScheduledArea
from pzq.store.store import Store
from pzq.store.topic_model import DEFAULT_GROUP_ID, ON_EXPIRE_DEAD
from pzq.store.topics import Topics


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


CLIENT_ROLES = ("receive", "send", "consume", "monitor")  # the route table's endpoints


def client_endpoints(config: Config) -> dict[str, str]:
    """Where clients reach this node, by role: a wildcard host becomes the host of the
    cluster endpoint (the one the peers reach), else the loopback address."""
    host = host_of(config.broadcast_dsn) if config.broadcast_dsn else "127.0.0.1"
    return {role: advertised(config.endpoints[role], host) for role in CLIENT_ROLES
            if role in config.endpoints}


class NodeState:
    def __init__(self, config: Config, store: Store, now: Now) -> None:
        self.config = config
        self.store = store
        self.node_id = store.node_id
        self.started = now.mono
        self.counters = Counters()
        # what each client key may do (--authorization; everything without it): read
        # here, so a bad file stops the start (ConfigError)
        self.authorization: Authorization = authorization(
            config.authorization, keyed=config.curve_secret_key is not None,
            admitted=admitted_keys(config.curve_authorized_keys))
        self.keys = KeyDirectories()  # what CURVE admits, read again on SIGHUP
        self.hub = EventHub()  # what happens in one part and others act on (pzq.events)
        self.holds = PeerHolds()  # own messages the peers have out (none without a cluster)
        self.topics = Topics(store, config.archive_topic)
        store.register(self.topics)  # first: the delivery states' deletes go through it
        self.default_area = DefaultArea(store, self.topics)
        # before the delivery states: their batches' expiries are counted after its own
        self.expiry = MessageExpiry(store, self.topics, self.counters)
        store.register(self.expiry)
        self.lanes = Lanes(store, self.topics)  # PRIORITY: on a topic with priorities=on
        store.register(self.lanes)
        self.delivery = DeliveryState(self.default_area, config.delivery, self.counters,
                                      self.holds, self.expiry, self.lanes,
                                      KeptWaits(store, DEFAULT_GROUP_ID))
        self.window = DeliveryWindow(config.prefetch, config.ack_timeout_us, now.wall_us)
        self.rates = Rates(("received", "delivered", "acked"))
        self.rates.sample(now.mono, self.counters)  # the zero every rate starts from
        self.latency = LatencyWindow()
        for name, count in config.partitioned_topics.items():  # --partitions
            try:
                self.topics.partition(self.topics.topic(name, now.wall_us), count)
            except ValueError as exc:
                raise ConfigError(f"--partitions: {exc}") from None
        self._default_topic_expiry(config, now)
        self.dedup = DedupIndex(store)
        store.register(self.dedup)
        self.scheduled = ScheduledArea(store)  # DELAY:, NOT-BEFORE: until due
        store.register(self.scheduled)
        store.register(self.delivery)
        settings = config.cluster
        clients = client_endpoints(config)
        if settings is not None:
            core = ClusterCore(settings, store, self._delivery_state, now.mono, self.topics,
                               clients, self.holds, self.hub, self.scheduled,
                               lambda: who_reads(self.topics))
            store.register(core)
            self.cluster: Cluster = core
        else:
            self.cluster = NoCluster(Routes(Placement(LONE_NODE, None), clients, self.topics))
        self.routes = self.cluster.routes
        archive = config.archive
        self.archiving: Archiving | NoArchiving = (
            Archiving(ArchiveTier(archive), stored_at_in(store)) if archive is not None
            else NoArchiving())
        store.register(self.archiving)

    def _default_topic_expiry(self, config: Config, now: Now) -> None:
        """--max-age, --on-expire and --send-priorities, when given, are the default
        topic's settings."""
        if config.max_age_us or config.on_expire != ON_EXPIRE_DEAD or config.send_priorities:
            topic = self.topics.topic(config.archive_topic, now.wall_us)
            topic.max_age_us = config.max_age_us or topic.max_age_us
            topic.on_expire = config.on_expire
            topic.priorities = topic.priorities or config.send_priorities
            self.topics.changed(topic)

    def _delivery_state(self, area: TakeoverArea) -> DeliveryState:
        """A taken-over area's. A named group taken over counts its own work (STATS
        shows it per origin and group), as an own named group does; ``default``'s is
        the node's."""
        named = area.group != DEFAULT_GROUP
        counters = Counters() if named else self.counters
        return DeliveryState(area, self.config.delivery, counters,
                             expiry=CopyExpiry(self.topics, self.counters))

    def requeued(self, batch: Batch, seq: int, value: bytes) -> None:
        """A dead letter stored again as a new message: into its topic's log."""
        topic, tag = self.topics.describe(value)
        self.topics.note_new(batch, seq, topic, tag, len(value))

    def released(self, seq: int) -> None:
        """An own scheduled message was released (or expired): the peers drop their
        copies of it."""
        self.cluster.removed(self.node_id, seq)

    def copy_requeued(self, messages: list[tuple[int, bytes]], mono: float) -> None:
        """Dead letters requeued as new messages: copied to the peers as new messages
        are (no producer waits for the confirmations)."""
        if self.config.replicas and messages:
            self.cluster.replicate_quietly(messages, mono)

    def reap(self, now_us: int) -> int:
        """Taken-over deliveries whose deadline passed back (every group's; each group
        reaps its own), and de-duplication ids past every window let go. Returns how
        many taken-over deliveries expired."""
        expired = self.cluster.takeovers.reap(now_us)
        self.dedup.expire(now_us - self.longest_dedup_window_us())
        return expired

    def longest_dedup_window_us(self) -> int:
        """Ids older than every topic's window are let go."""
        return max([self.config.dedup_window_us,
                    *(topic.dedup_window_us for topic in self.topics.topics.values())])
