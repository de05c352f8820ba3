"""The delivery window: a slow consumer gets work at its pace, a fast one at full speed.

The window's rules are tested with time passed in; the real-node tests check what a
user sees: a consumer much slower than its producer gets (almost) no duplicates (on a
daemon), and no more than --prefetch at once (on a node in this process).
"""

from __future__ import annotations

import threading

import pytest

from pzq.client import Consumer, Producer
from pzq.delivery.window import INITIAL, DeliveryWindow

ACK_TIMEOUT_US = 1_000_000


def run_consumer(window: DeliveryWindow, acks_per_second: int, seconds: float) -> None:
    """Consumers that ack at a fixed rate, fed as much as the window allows."""
    step_us, budget, unacked = 1_000, 0.0, 0
    for now_us in range(step_us, int(seconds * 1_000_000) + 1, step_us):
        budget += acks_per_second * step_us / 1_000_000
        done = min(unacked, int(budget))
        budget -= done
        unacked -= done
        window.acked(done)
        unacked += window.room(unacked)
        window.update(now_us)


@pytest.mark.timeout(10)
def test_fast_consumers_open_the_window_to_the_limit():
    window = DeliveryWindow(limit=1000, ack_timeout_us=ACK_TIMEOUT_US, now_us=0)
    assert window.size == INITIAL
    run_consumer(window, acks_per_second=50_000, seconds=0.2)
    assert window.size == 1000


@pytest.mark.timeout(10)
def test_slow_consumers_keep_the_wait_a_quarter_of_the_ack_timeout():
    window = DeliveryWindow(limit=1000, ack_timeout_us=ACK_TIMEOUT_US, now_us=0)
    run_consumer(window, acks_per_second=333, seconds=3)
    # 333 a second for a quarter of a second: about 83 unacked at a time.
    assert 60 <= window.size <= 110, window.size


@pytest.mark.timeout(10)
def test_expiries_halve_the_window_and_it_never_closes():
    window = DeliveryWindow(limit=1000, ack_timeout_us=ACK_TIMEOUT_US, now_us=0)
    window.size = 800
    window.expired(5)
    assert window.size == 400
    window.expired(0)
    assert window.size == 400
    for _ in range(20):
        window.expired(1)
    assert window.size == 1
    assert window.room(0) == 1 and window.room(1) == 0


@pytest.mark.timeout(10)
def test_an_idle_node_does_not_shrink_the_window():
    window = DeliveryWindow(limit=1000, ack_timeout_us=ACK_TIMEOUT_US, now_us=0)
    window.size = 500
    for now_us in range(0, 5_000_000, 100_000):
        window.update(now_us)  # no deliveries held back, no acks
    assert window.size == 500


def slow_consumer_run(node, context, count: int, work_s: float,
                      backlog_first: bool) -> dict:
    def produce() -> None:
        with Producer(node.receive_dsn, window=100, context=context) as producer:
            for i in range(count):
                producer.send([b"%d" % i])
            assert all(ack.ok for ack in producer.flush(60))

    producing = threading.Thread(target=produce)
    producing.start()
    if backlog_first:
        producing.join()
    seen: set[bytes] = set()
    with Consumer(node.send_dsn, context=context) as consumer:
        while len(seen) < count:
            message = consumer.receive(30)
            assert message is not None, f"{len(seen)} of {count} consumed"
            threading.Event().wait(work_s)  # the consumer's own work, not a synchronisation
            seen.add(message.parts[0])
            message.ack()
    producing.join()
    return node.wait_stats(lambda s: s["messages"] == 0, message="every ack applied")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backlog_first", [False, True], ids=["producing", "backlog"])
def test_a_slow_consumer_gets_no_storm_of_duplicates(start_node, context, backlog_first):
    # On a daemon: it counts the deliveries that come late, and a node in this process
    # shares the interpreter with the producer and the consumer (there, 1 200 messages
    # were delivered 1 396 times once).
    node = start_node("--ack-timeout", str(ACK_TIMEOUT_US), "--reaper-frequency", "100000")
    count = 1200
    stats = slow_consumer_run(node, context, count, 0.003, backlog_first)
    assert stats["delivered"] <= 1.05 * count, stats["delivered"]
    assert stats["ack_latency_ms"]["p99"] < ACK_TIMEOUT_US / 1000
    assert stats["delivery_window"] < stats["prefetch"]


@pytest.mark.timeout(60)
def test_prefetch_caps_unacked_deliveries(start_inproc_node, context):
    node = start_inproc_node("--prefetch", "5", consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        for i in range(50):
            producer.send([b"%d" % i])
        producer.flush(15)
    with Consumer(node.send_dsn, context=context) as consumer:
        held = [consumer.receive(10) for _ in range(5)]
        assert all(held)
        stats = node.stats()  # five unacked: the window lets nothing more out
        assert stats["messages_inflight"] == stats["delivered"] == 5
        held[0].ack()
        assert consumer.receive(10) is not None
