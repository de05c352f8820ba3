"""The node's figures for MONITOR and STATS, all from counters kept as work happens,
and the part of the loop that keeps their rates and gives them."""

from __future__ import annotations

from collections.abc import Sized

from pzq import __version__
from pzq.clock import Now
from pzq.delivery.ages import TopicAges, age_seconds
from pzq.node.state import NodeState
from pzq.node.topic_figures import topic_figures
from pzq.node.topic_rates import TopicRates
from pzq.parts import Figures, Part
from pzq.rates import SAMPLE_EVERY_S
from pzq.serving.connections import ConsumerCount
from pzq.serving.named_groups import NamedGroups
from pzq.zmqio import Events


class NodeFigures(Part):
    """The node's sections of STATS; the rates are sampled once a wake, before the
    monitor answers. ``acks``: producer ACKs waiting to be sent; ``connections``: the
    consumers on --send-dsn; ``consume``: the named groups."""

    def __init__(self, node: NodeState, acks: Sized, connections: ConsumerCount,
                 consume: NamedGroups) -> None:
        self.node = node
        self.acks = acks
        self.connections = connections
        self.consume = consume
        self.topic_rates = TopicRates()
        self.ages = TopicAges(node.store, node.topics)
        self._next_sample = 0.0  # monotonic seconds: the node's rates sample again then

    def answer(self, events: Events, now: Now) -> None:
        """The rates sample every SAMPLE_EVERY_S, and the topics' at once when a topic
        or group came or went (TopicRates.sample): a wake in between asks neither."""
        node, rates = self.node, self.topic_rates
        if now.mono < self._next_sample and len(node.topics.topics) == len(rates.topics) \
                and len(self.consume.groups) == len(rates.groups):
            return
        if now.mono >= self._next_sample:
            self._next_sample = now.mono + SAMPLE_EVERY_S
        node.rates.sample(now.mono, node.counters)
        self.topic_rates.sample(now.mono, node.topics, self.consume)

    def acked(self) -> int:
        """Node-wide: what ``default``'s consumers ACKed (--send-dsn, the takeovers'
        included) and each named group's own."""
        return self.node.counters.acked + sum(
            group.counters.acked for group in self.consume.groups.values())

    def figures(self, now: Now) -> Figures:
        node = self.node
        figures = node_figures(node, len(self.acks), self.connections.connected, now.mono,
                               now.wall_us / 1e6)
        figures["topics"] = topic_figures(node, self.consume, self.topic_rates, now.wall_us,
                                          now.mono, self.ages)
        oldest = node.delivery.oldest_open()  # ``default``'s, on --send-dsn
        figures["lag_seconds"] = age_seconds(None if oldest is None else oldest[1],
                                             now.wall_us)
        figures["taken_over"] = node.cluster.takeovers.figures(now.wall_us)
        return figures


def node_figures(node: NodeState, pending_producer_acks: int, consumers_connected: int,
                 mono: float, wall_s: float) -> dict[str, object]:
    store, counters = node.store, node.counters
    inflight, ready = node.delivery.inflight, node.delivery.ready
    return {
        # The original pzq's MONITOR keys
        "messages": store.messages,
        "messages_inflight": len(inflight),
        "db_size": store.bytes,
        "inflight_db_size": inflight.bytes,
        "syncs": store.syncs,
        "expired_messages": counters.expired,
        # and ours
        "messages_ready": len(ready),
        "delivery_window": node.window.size,
        "prefetch": node.window.limit,
        "ready_size": ready.bytes,
        "dead_letters": store.dead_letters,
        "pending_producer_acks": pending_producer_acks,
        "consumers_connected": consumers_connected,
        "version": __version__,
        "node_id": node.node_id.decode(),
        "uptime_seconds": round(mono - node.started, 3),
        "hard_sync": int(node.config.hard_sync),
        # what a power cut would lose now: see pzq.store.log_sync
        "log_syncs": store.log_syncs,
        "store_sync_age_s": round(store.log_sync.sync_age_s(mono), 3),
        "store_unsynced_s": round(store.log_sync.unsynced_s(mono), 3),
        # a full disk with nobody producing refuses no message, yet fails every write
        "store_write_failing": int(store.write_failing_since is not None),
        "store_write_failing_s": round(store.write_failing_s(mono), 3),
        **counters.as_dict(),
        "rates": node.rates.rates(mono, counters),
        "ack_latency_ms": node.latency.percentiles_ms(mono),
        "ack_latency_histogram": node.latency.histogram.snapshot(),
        "producer_acks": {"ok": counters.acks_ok, "failed": counters.acks_failed,
                          "replication_failed": counters.acks_replication_failed},
        **node.cluster.snapshot(mono),
        "archive": node.archiving.figures(wall_s),
    }
