"""Per-second rates of each topic (received) and each named group (delivered, acked),
over 1 s and 60 s, sampled as the node's own rates are (see pzq.rates)."""

from __future__ import annotations

from pzq.rates import SAMPLE_EVERY_S, Rates
from pzq.serving.named_groups import NamedGroups
from pzq.store.topics import Topics

TOPIC_RATES = ("received",)
GROUP_RATES = ("delivered", "acked")


class TopicRates:
    def __init__(self) -> None:
        self.topics: dict[int, Rates] = {}  # by topic id
        self.groups: dict[int, Rates] = {}  # by group id
        self._sampled: float | None = None

    def sample(self, now: float, topics: Topics, consume: NamedGroups) -> None:
        """A sample of every topic and group every SAMPLE_EVERY_S, and at once when
        one came or went; in between a wake costs nothing per topic."""
        groups = consume.groups
        if self._sampled is not None and now - self._sampled < SAMPLE_EVERY_S \
                and len(topics.topics) == len(self.topics) and len(groups) == len(self.groups):
            return
        # A topic or group new since the last sample had counted nothing then.
        began = now if self._sampled is None else self._sampled
        self._sampled = now
        self.topics = {topic.id: _sampled(self.topics.get(topic.id), TOPIC_RATES, began, now,
                                          topic)
                       for topic in topics.topics.values()}
        self.groups = {group_id: _sampled(self.groups.get(group_id), GROUP_RATES, began, now,
                                          deliveries.counters)
                       for group_id, deliveries in groups.items()}


def _sampled(rates: Rates | None, names: tuple[str, ...], began: float, now: float,
             counters: object) -> Rates:
    if rates is None:
        rates = Rates(names).begin(began)
    rates.sample(now, counters)
    return rates
