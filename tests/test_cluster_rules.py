"""The cluster's rules in process: real stores and ClusterCores, time passed in.

The same rules run between real daemons in tests/test_cluster.py; here each takes
milliseconds, so the corner cases get tested too.
"""

from __future__ import annotations

import pytest

from cluster_sim import TIMEOUT_NODES_US, TIMEOUT_REPLICATION_US, SimNetwork
from pzq.store import keyspace

pytestmark = pytest.mark.timeout(20)
T0 = 1000.0
AFTER_TIMEOUT = TIMEOUT_NODES_US / 1e6 + 0.5


@pytest.fixture
def three(tmp_path):
    network = SimNetwork(tmp_path, 3, replicas=2, now=T0)
    network.step(T0, heartbeat=True)
    yield network
    network.close()


def test_everyone_is_up_after_one_heartbeat(three):
    for node in three.nodes:
        assert [peer.up for peer in node.core.peers.peers.values()] == [True, True]


def test_producer_ack_waits_for_every_copy(three):
    origin, first, second = three.nodes
    seqs = origin.produce([b"a", b"b"], T0)
    assert origin.acks == []  # nothing confirmed before the copies travel
    three.step(T0)
    assert [(ack.msg_id, ack.replicated) for ack in origin.acks] == [(b"a", True), (b"b", True)]
    for holder in (first, second):
        assert holder.core.replicas.counts[origin.node_id] == len(seqs)


def test_missing_copy_fails_at_the_replication_deadline(three):
    origin, first, second = three.nodes
    three.cut.add((origin.endpoint, second.endpoint))
    origin.produce([b"a"], T0)
    three.step(T0)
    assert origin.acks == []  # one copy of two
    deadline = T0 + TIMEOUT_REPLICATION_US / 1e6
    assert origin.core.expire(deadline - 0.001) == []
    (failed,) = origin.core.expire(deadline)
    assert failed.msg_id == b"a" and not failed.replicated


def test_an_ack_at_the_origin_removes_every_copy(three):
    origin, first, second = three.nodes
    origin.produce([b"a"], T0)
    three.step(T0)
    (key,) = origin.deliver(1)
    assert origin.ack(key)
    three.step(T0)
    assert origin.store.messages == 0
    assert first.core.replicas.counts[origin.node_id] == 0
    assert second.core.replicas.counts[origin.node_id] == 0


def test_takeover_by_the_first_live_holder_and_tombstones_for_the_origin(three):
    origin, first, second = three.nodes
    origin.produce([b"a", b"b"], T0)
    three.step(T0)
    origin.up = False  # a crash: nothing more from it
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    delivered = {node.endpoint: node.deliver(2) for node in (first, second)}
    holders = [endpoint for endpoint, keys in delivered.items() if keys]
    assert len(holders) == 1, delivered  # exactly one survivor delivers each message
    taker = three.by_endpoint[holders[0]]
    for key in delivered[taker.endpoint]:
        assert keyspace.parse_message_key(key)[0] == origin.node_id
        assert taker.ack(key)
    three.step(now)
    assert first.core.replicas.counts[origin.node_id] == 0
    assert second.core.replicas.counts[origin.node_id] == 0
    assert taker.core.replicas.tombstones[origin.node_id] == 2

    origin.up = True  # it comes back and collects the tombstones before delivering
    later = now + 0.1
    three.step(later, heartbeat=True)
    assert origin.store.messages == 0
    assert origin.deliver(3) == []
    three.step(later)  # APPLIED: the tombstones are dropped
    assert taker.core.replicas.tombstones[origin.node_id] == 0
