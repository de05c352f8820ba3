"""Rates and latency percentiles with time passed in."""

import random
from collections import Counter, deque
from types import SimpleNamespace

import pytest

from pzq import rates
from pzq.rates import LatencyWindow, Rates

pytestmark = pytest.mark.timeout(10)


def test_rates_over_one_second_and_one_minute():
    rates = Rates(("received",))
    for second in range(0, 121):
        rates.sample(float(second), SimpleNamespace(received=second * 10))
    figures = rates.rates(120.0, SimpleNamespace(received=1200))
    assert figures["received_1s"] == pytest.approx(10.0)
    assert figures["received_60s"] == pytest.approx(10.0)


def test_rates_right_after_start_are_zero_not_an_error():
    rates = Rates(("acked",))
    assert rates.rates(5.0, SimpleNamespace(acked=0)) == {"acked_1s": 0.0, "acked_60s": 0.0}


def test_latency_percentiles_forget_old_samples():
    window = LatencyWindow()
    for i in range(100):
        window.add(10.0, (i + 1) / 1000)
    figures = window.percentiles_ms(10.0)
    assert (figures["p50"], figures["p99"], figures["max"], figures["samples"]) == (51.0, 100.0,
                                                                                    100.0, 100)
    assert window.percentiles_ms(100.0)["samples"] == 0


def test_latency_histogram_is_cumulative_and_kept_since_start():
    window = LatencyWindow()
    for latency in (0.0005, 0.001, 0.003, 0.2, 7.0, 1000.0):
        window.add(0.0, latency)
    window.percentiles_ms(500.0)  # the minute window forgets; the histogram does not
    histogram = window.histogram.snapshot()
    assert histogram["count"] == 6
    assert histogram["sum_seconds"] == pytest.approx(1007.2045)
    buckets = histogram["buckets"]
    assert (buckets["0.001"], buckets["0.005"], buckets["0.25"], buckets["10"],
            buckets["300"]) == (2, 3, 4, 5, 5)
    assert list(buckets.values()) == sorted(buckets.values())


def test_latencies_by_send_time_are_each_deliverys_as_added_one_by_one():
    """An ACK's many: a latency worked out once per send time (0: not known, left
    out) counts as one sample per delivery, in the histogram and its sum as well."""
    sent_us = [1_000, 1_000, 0, 4_000, 1_000, 4_000, 9_000]
    grouped, each = LatencyWindow(), LatencyWindow()
    grouped.add_sent(5.0, 12_000, sent_us)
    grouped.add_sent(5.0, 12_000, [7_000] * 3)
    grouped.add_sent(5.0, 12_000, [])
    for sent in [*sent_us, 7_000, 7_000, 7_000]:
        if sent:
            each.add(5.0, (12_000 - sent) / 1e6)
    assert grouped.percentiles_ms(5.0) == each.percentiles_ms(5.0)
    assert grouped.percentiles_ms(5.0)["samples"] == 9
    assert grouped.histogram.snapshot() == each.histogram.snapshot()


class OneByOne:
    """The window's simple form: a sample a delivery, the oldest dropped past the bound."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=rates.LATENCY_SAMPLES)

    def add(self, now: float, latency_s: float) -> None:
        self.samples.append((now, latency_s))

    def percentiles_ms(self, now: float) -> dict[str, float | int]:
        while self.samples and now - self.samples[0][0] > rates.KEEP_S - 1:
            self.samples.popleft()
        values = sorted(latency for _, latency in self.samples)
        if not values:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "samples": 0}
        return {**{name: round(values[min(len(values) - 1, int(at * len(values)))] * 1000, 3)
                   for name, at in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
                "max": round(values[-1] * 1000, 3), "samples": len(values)}


@pytest.mark.parametrize("bound", [10_000, 150])
def test_latencies_kept_by_count_answer_as_one_sample_each(monkeypatch, bound):
    """Random ACKs (many sent at once, at a few times, one alone, some not known) over
    two minutes: the percentiles as a sample a delivery gives them, the oldest dropped
    past the bound and past a minute, and the histogram's counts the same."""
    monkeypatch.setattr(rates, "LATENCY_SAMPLES", bound)
    rng = random.Random(bound)
    window, simple, histogram = LatencyWindow(), OneByOne(), LatencyWindow().histogram
    now = 0.0
    for _ in range(2_000):
        now += rng.choice((0.0, 0.01, 0.2))
        now_us = int(now * 1e6) + 50_000
        shape = rng.random()
        if shape < 0.1:
            latency = rng.random()
            window.add(now, latency)
            sent_us = []
            simple.add(now, latency)
            histogram.add(latency)
        else:
            times = rng.sample(range(1, 50_000, 7), rng.choice((1, 1, 2, 5)))
            sent_us = rng.choices([*times, 0], k=rng.choice((1, 3, 100, 400)))
            window.add_sent(now, now_us, sent_us)
            for sent, count in Counter(sent_us).items():  # (grouped by send time)
                for _ in range(count if sent else 0):
                    simple.add(now, (now_us - sent) / 1e6)
                    histogram.add((now_us - sent) / 1e6)
        if rng.random() < 0.2:
            assert window.percentiles_ms(now) == simple.percentiles_ms(now)
    assert window.percentiles_ms(now + 30) == simple.percentiles_ms(now + 30)
    ours, theirs = window.histogram.snapshot(), histogram.snapshot()
    assert ours["sum_seconds"] == pytest.approx(theirs["sum_seconds"], rel=1e-9)
    assert {**ours, "sum_seconds": 0} == {**theirs, "sum_seconds": 0}
