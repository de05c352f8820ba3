"""Rates and latency percentiles with time passed in."""

from types import SimpleNamespace

import pytest

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
