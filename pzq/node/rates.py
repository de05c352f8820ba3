"""Rates over the last second and minute, and ACK latency percentiles, for STATS.

Both are fed as the work happens, with ``now`` passed in, and answer without
touching the store: a rate is the difference of two counter samples, latency
percentiles are taken over a bounded window of recent ACKs.
"""

from __future__ import annotations

from collections import deque

SAMPLE_EVERY_S = 0.5
KEEP_S = 61.0
LATENCY_SAMPLES = 10_000


class Rates:
    """Per-second rates of some counters of an object, over 1 s and 60 s."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._samples: deque[tuple[float, tuple[int, ...]]] = deque()

    def _read(self, counters: object) -> tuple[int, ...]:
        return tuple(getattr(counters, name) for name in self.names)

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


class LatencyWindow:
    """Recent ACK latencies (seconds), the oldest dropped past a minute or a bound."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=LATENCY_SAMPLES)

    def add(self, now: float, latency_s: float) -> None:
        self._samples.append((now, latency_s))

    def percentiles_ms(self, now: float) -> dict[str, float | int]:
        while self._samples and now - self._samples[0][0] > KEEP_S - 1:
            self._samples.popleft()
        values = sorted(latency for _, latency in self._samples)
        if not values:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "samples": 0}

        def at(fraction: float) -> float:
            return round(values[min(len(values) - 1, int(fraction * len(values)))] * 1000, 3)

        return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99),
                "max": round(values[-1] * 1000, 3), "samples": len(values)}
