"""A groups benchmark row over its repeats: medians, ranges and whether the target is met."""

import pytest

from pzq.bench.groups import Row

pytestmark = pytest.mark.timeout(10)


def test_a_row_gives_the_median_of_its_repeats_with_their_range():
    row = Row("drain, 3 groups at once: g1", "ratio >= 0.8", 0.8)
    for rate, ratio in ((900.0, 0.9), (300.0, 0.3), (1000.0, 1.0)):
        row.add(rate, ratio)
    row.cpu(20.0, 10.0)
    row.cpu(40.0, 30.0)
    found = row.summary()
    assert (found["rate"], found["rate_range"]) == (900.0, [300.0, 1000.0])
    assert (found["ratio"], found["ratio_range"]) == (0.9, [0.3, 1.0])
    assert (found["node_cpu_us"], found["consumer_cpu_us"]) == (30.0, 20.0)
    assert found["met"] is True and "p50_ms" not in found


def test_a_row_misses_its_target_on_the_median_ratio_or_the_median_p99_ratio():
    slow = Row("slow", "ratio >= 1", 1.0)
    slow.add(100.0, 0.5)
    slow.add(300.0, 1.5)
    slow.add(200.0, 0.9)
    assert slow.met() is False
    late = Row("late", "ratio >= 1, p99 ratio <= 1", 1.0, 1.0)
    late.add(100.0, 1.2, 5.0, 40.0, 2.0)
    assert late.met() is False
    assert Row("a baseline").met() is None


def test_the_peers_table_gives_the_asyncio_client_over_the_sync_one_within_each_repeat():
    from pzq.bench.peer_table import OVER_SYNC, Table

    table = Table([("pzq", "pzq"), ("Redis Streams", "Redis")])
    for sync, aio, redis_aio in ((100.0, 90.0, 45.0), (200.0, 100.0, 50.0)):
        table.add_repeat({"pzq": {"produce": sync, "aio produce": aio},
                          "Redis Streams": {"aio produce": redis_aio}})
    found = {row["figure"]: row for row in table.summary()}
    produced = found["asyncio: produce"]
    assert produced[OVER_SYNC] == {"median": 0.7, "repeats": [0.9, 0.5]}
    assert produced["pzq/Redis"]["repeats"] == [2.0, 2.0]
    assert OVER_SYNC not in found["produce 100 B, window 100, ACK after write"]
    lines = table.lines()
    assert lines[0].endswith(OVER_SYNC)
    (row,) = [line for line in lines if line.startswith("asyncio: produce ")]
    assert row.endswith("0.70 (0.50-0.90)")
