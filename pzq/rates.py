"""Rates over the last second and minute, ACK latency percentiles and histogram, for STATS.

Both are fed as the work happens, with ``now`` passed in, and answer without
touching the store: a rate is the difference of two counter samples, latency
percentiles are taken over a bounded window of recent ACKs.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, deque
from operator import itemgetter

SAMPLE_EVERY_S = 0.5
KEEP_S = 61.0
LATENCY_SAMPLES = 10_000
LATENCY_OF, COUNT_OF = itemgetter(1), itemgetter(2)  # of a LatencyWindow's samples
# Upper bounds (seconds) of the ACK latency histogram: 1 ms up to the longest ack timeouts.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0, 30.0, 60.0, 300.0)


class Rates:
    """Per-second rates of some counters of an object, over 1 s and 60 s."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._samples: deque[tuple[float, tuple[int, ...]]] = deque()

    def _read(self, counters: object) -> tuple[int, ...]:
        return tuple(getattr(counters, name) for name in self.names)

    def begin(self, now: float) -> Rates:
        """Counters that began at zero (a topic or group new to this process)."""
        self._samples.append((now, (0,) * len(self.names)))
        return self

    def sample(self, now: float, counters: object) -> None:
        if self._samples and now - self._samples[-1][0] < SAMPLE_EVERY_S:
            return
        self._samples.append((now, self._read(counters)))
        while self._samples and now - self._samples[0][0] > KEEP_S:
            self._samples.popleft()

    def rates(self, now: float, counters: object) -> dict[str, float]:
        current = self._read(counters)
        figures = {}
        for label, span in (("1s", 1.0), ("60s", 60.0)):
            sample = self._sample_near(now - span)
            for index, name in enumerate(self.names):
                if sample is None or sample[0] >= now:
                    figures[f"{name}_{label}"] = 0.0
                else:
                    rate = (current[index] - sample[1][index]) / (now - sample[0])
                    figures[f"{name}_{label}"] = round(rate, 3)
        return figures

    def _sample_near(self, moment: float) -> tuple[float, tuple[int, ...]] | None:
        """The newest sample at or before ``moment``, else the oldest one there is."""
        chosen = None
        for sample in self._samples:
            if sample[0] > moment and chosen is not None:
                break
            chosen = sample
        return chosen


class LatencyHistogram:
    """Every ACK latency since start, counted into fixed buckets (a Prometheus histogram)."""

    def __init__(self, bounds_s: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds_s = bounds_s
        self._counts = [0] * (len(bounds_s) + 1)  # the last one: above every bound
        self.sum_s = 0.0

    def add(self, latency_s: float) -> None:
        self._counts[bisect.bisect_left(self.bounds_s, latency_s)] += 1
        self.sum_s += latency_s

    def add_repeated(self, latency_s: float, count: int) -> None:
        """``add`` of the same latency ``count`` times: its bucket found once, the sum
        grown once (by the product: within rounding of ``count`` additions)."""
        self._counts[bisect.bisect_left(self.bounds_s, latency_s)] += count
        self.sum_s += latency_s * count

    def snapshot(self) -> dict[str, object]:
        """Cumulative counts per upper bound (seconds, as text), as Prometheus reads them."""
        cumulative = list(itertools.accumulate(self._counts))
        # One bound per count but the last (above every bound, only in "count").
        buckets = zip(self.bounds_s, cumulative[:-1], strict=True)
        return {"buckets": {f"{bound:g}": count for bound, count in buckets},
                "count": cumulative[-1], "sum_seconds": round(self.sum_s, 6)}


class LatencyWindow:
    """Recent ACK latencies (seconds), the oldest dropped past a minute or past
    LATENCY_SAMPLES of them.

    A latency is kept with how many deliveries had it (an ACK's many sent together
    share theirs): one entry for them, not one each, counted as that many samples.
    Every latency also goes into a histogram kept since start, for Prometheus.
    """

    def __init__(self) -> None:
        # (when ACKed, latency, how many deliveries), oldest first; and how many in all
        self._samples: deque[tuple[float, float, int]] = deque()
        self._count = 0
        self.histogram = LatencyHistogram()

    def add(self, now: float, latency_s: float) -> None:
        self._samples.append((now, latency_s, 1))
        self._count += 1
        if self._count > LATENCY_SAMPLES:
            self._drop_oldest(self._count - LATENCY_SAMPLES)
        self.histogram.add(latency_s)

    def add_sent(self, now: float, now_us: int, sent_us: list[int]) -> None:
        """``add`` of the latency of each delivery sent at ``sent_us`` (µs; 0: not
        known, left out) and ACKed at ``now_us``, worked out once per send time: the
        deliveries of a run share theirs, so an ACK of many has one or a few, each
        kept once with its count (its samples go in grouped by send time, not in the
        ACK's order)."""
        if not sent_us:
            return
        first = sent_us[0]
        times: dict[int, int] = ({first: len(sent_us)}
                                 if sent_us.count(first) == len(sent_us) else Counter(sent_us))
        times.pop(0, None)
        samples, histogram = self._samples, self.histogram
        for sent, count in times.items():
            latency = (now_us - sent) / 1e6
            samples.append((now, latency, count))
            self._count += count
            histogram.add_repeated(latency, count)
        if self._count > LATENCY_SAMPLES:
            self._drop_oldest(self._count - LATENCY_SAMPLES)

    def _drop_oldest(self, count: int) -> None:
        """The ``count`` oldest samples go (the last entry touched keeps the rest)."""
        samples = self._samples
        self._count -= count
        while count:
            when, latency, many = samples[0]
            if many > count:
                samples[0] = (when, latency, many - count)
                return
            samples.popleft()
            count -= many

    def percentiles_ms(self, now: float) -> dict[str, float | int]:
        samples = self._samples
        while samples and now - samples[0][0] > KEEP_S - 1:
            self._count -= samples.popleft()[2]
        if not samples:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "samples": 0}
        ordered = sorted(samples, key=LATENCY_OF)
        latencies: list[float] = list(map(LATENCY_OF, ordered))
        ends = list(itertools.accumulate(map(COUNT_OF, ordered)))  # each one's last place + 1
        total = ends[-1]

        def at(fraction: float) -> float:
            place = min(total - 1, int(fraction * total))  # in the samples one by one
            return round(latencies[bisect.bisect_right(ends, place)] * 1000, 3)

        return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99),
                "max": round(latencies[-1] * 1000, 3), "samples": total}
