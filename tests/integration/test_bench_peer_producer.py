"""bench_peers' pzq producer looks at its ACKs as they come and keeps none, as the
peers' clients look at each pipeline's replies: 20 000 ACKs kept to the end (tuples
the collector never untracks) made its garbage collector run during the run where
Redis's client hardly ran it."""

import gc
import queue

import pytest

from pzq.bench import peer_pzq
from pzq.bench.peer_system import Setup

pytestmark = pytest.mark.timeout(60)

MESSAGES = 5_000  # kept, some 7 collections of the youngest generation (700 each)


def test_the_producer_keeps_no_acks_so_its_collector_does_not_run(tmp_path):
    results: queue.Queue[dict[str, object]] = queue.Queue()
    with peer_pzq.serve(tmp_path, Setup(groups=("g",))) as served:
        before = sum(generation["collections"] for generation in gc.get_stats())
        peer_pzq.produce(served.address, MESSAGES, 100, 100, None, results)
        collections = sum(generation["collections"] for generation in gc.get_stats()) - before
    report = results.get_nowait()
    assert report["count"] == MESSAGES and report["failed"] == 0
    assert collections <= 2, f"{collections} collections while producing"


def test_refused_messages_are_counted_as_their_acks_come(tmp_path):
    """A node that refuses past its room: the report counts each refusal once, those
    looked at during the run and those at its end alike."""
    results: queue.Queue[dict[str, object]] = queue.Queue()
    node = peer_pzq.NodeProcess(tmp_path / "pzq", "--max-messages", "250", consume=True)
    node.start()
    try:
        peer_pzq.groups_only(node, ["g"], "")
        peer_pzq.produce({"receive": node.receive_dsn}, 1_000, 100, 100, None, results)
    finally:
        node.kill()
    report = results.get_nowait()
    assert report["count"] == 1_000 and report["failed"] == 750
