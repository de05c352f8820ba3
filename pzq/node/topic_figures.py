"""Figures per topic and per consumer group for STATS, from what is kept as work
happens: the topic's counters, each group's delivery state and counters."""

from __future__ import annotations

from pzq.delivery.ages import TopicAges, age_seconds
from pzq.delivery.state import DeliveryState
from pzq.node.state import NodeState
from pzq.node.topic_rates import GROUP_RATES, TOPIC_RATES, TopicRates
from pzq.rates import Rates
from pzq.serving.holding import NamedGroupDelivery
from pzq.serving.named_groups import NamedGroups
from pzq.store.topics import Group

GROUP_COUNTERS = ("delivered", "redelivered", "acked", "late_acks", "nacked", "expired",
                  "evicted", "dead_lettered", "unknown_acks")


def topic_figures(node: NodeState, consume: NamedGroups, rates: TopicRates,
                  now_us: int, mono: float, ages: TopicAges) -> dict[str, object]:
    topics: dict[str, object] = {}
    oldest = ages.oldest_seconds(now_us)
    for topic in node.topics.topics.values():
        figures: dict[str, object] = {
            "messages": max(0, topic.messages),
            "bytes": max(0, topic.stored_bytes),
            "oldest_seconds": oldest.get(topic.name, 0),
            "default_group": topic.default_reads,
            "default_rule": topic.default_rule,
            "ttl_expired": topic.ttl_expired,
            "max_age_us": topic.max_age_us,
            "on_expire": topic.on_expire,
            "priorities": topic.priorities,
            "scheduled": node.scheduled.counts.get(topic.name, 0),
            "next_due_us": node.scheduled.next_due_us(topic.name) or 0,
            "rates": _rates(rates.topics.get(topic.id), TOPIC_RATES, mono, topic),
            "groups": {group.name: group_figures(group, consume.groups.get(group.id),
                                                 rates.groups.get(group.id), now_us, mono)
                       for group in topic.groups.values()},
        }
        if topic.partitions:
            figures["partitions"] = topic.partitions
            figures["partitions_owned"] = node.routes.placement.owned(
                topic.name, topic.partitions, mono)
        topics[topic.name] = figures
    return topics


def group_figures(group: Group, deliveries: NamedGroupDelivery | None, rates: Rates | None,
                  now_us: int, mono: float) -> dict[str, object]:
    figures: dict[str, object] = {"filter": group.filter, "start_seq": group.start_seq,
                                  "backlog": max(0, group.backlog)}
    if deliveries is None:
        return figures
    figures["rates"] = _rates(rates, GROUP_RATES, mono, deliveries.counters)
    state = deliveries.state
    oldest = state.inflight.oldest()
    counters = deliveries.counters.as_dict()
    idle = [consumer.idle_seconds(mono) for consumer in deliveries.consumers]
    figures.update({
        "inflight": len(state.inflight),
        "ready": len(state.ready),
        "delayed": len(state.delayed),
        "lag": deliveries.lag(),
        "lag_seconds": age_seconds(_oldest_record(state), now_us),
        "ack_timeout_us": state.settings.ack_timeout_us,
        "max_deliveries": state.settings.max_deliveries,
        "backoff_us": list(state.settings.backoff_us),
        "consumers": len(deliveries.consumers),
        "consumer_list": [{"id": consumer.routing_id.hex(), "held": consumer.held_count,
                           "window": consumer.window, "idle_seconds": seconds}
                          for consumer, seconds in zip(deliveries.consumers, idle, strict=True)],
        "longest_idle_seconds": max(idle, default=0.0),
        "credits": deliveries.room(),
        "oldest_unacked_seconds": (round((now_us - oldest.sent_us) / 1e6, 3)
                                   if oldest is not None else 0),
        # from delivery to ACK over the last minute, as the node's own ack_latency_ms
        "ack_latency_ms": deliveries.latency.percentiles_ms(mono),
        **{name: counters[name] for name in GROUP_COUNTERS},
    })
    return figures



def _oldest_record(state: DeliveryState) -> bytes | None:
    found = state.oldest_open()
    return None if found is None else found[1]


def _rates(rates: Rates | None, names: tuple[str, ...], mono: float,
           counters: object) -> dict[str, float]:
    """Per second over 1 s and 60 s (zeros before a topic's or group's first sample)."""
    return (rates or Rates(names)).rates(mono, counters)
