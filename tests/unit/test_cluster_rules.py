"""The cluster's rules in process: real stores and ClusterCores, time passed in.

The same rules run between real daemons in tests/cluster/test_cluster.py; here each takes
milliseconds, so the corner cases get tested too.
"""

from __future__ import annotations

import pytest

from pzq.events import GroupDoneElsewhere
from pzq.protocol import cluster as cw
from pzq.protocol.cluster import DefaultReads, GroupReads
from pzq.protocol.message_keys import message_key, parse_message_key
from pzq.store import keyspace
from pzq.store.replicas import ReplicaStore
from tests.support.cluster_sim import (
    AFTER_TIMEOUT,
    T0,
    TIMEOUT_REPLICATION_US,
    SimNetwork,
)

pytestmark = pytest.mark.timeout(20)


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


def test_copies_no_producer_waits_for_are_held_and_answer_nobody(three):
    origin, first, second = three.nodes
    origin.produce([b"a"], T0)
    three.step(T0)
    origin.acks.clear()
    batch = origin.store.begin()
    seq = batch.add_message(b"requeued")
    origin.store.commit(batch)
    origin.core.replicate_quietly([(seq, b"requeued")], T0)  # a requeued dead letter
    three.step(T0)
    assert origin.acks == [] and origin.core.expire(T0 + 10) == []
    for holder in (first, second):
        assert holder.core.replicas.get(origin.node_id, seq) is not None
        assert holder.core.replicas.counts[origin.node_id] == 2


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
    assert origin.ack(key, T0)
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
        assert parse_message_key(key)[0] == origin.node_id
        assert taker.ack(key, now)
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


def test_a_resumed_takeover_counts_on_from_what_the_origin_delivered_since(three):
    """A takeover paused while its deliveries were out resumes when the origin dies
    again: what the origin delivered in between comes with a count of at least 2 (it
    counted on from the figure of the first takeover and said 1)."""
    origin, first, second = three.nodes
    told = [0]  # how far the origin's first deliveries went, as it tells its peers
    origin.core.own_reads = lambda: DefaultReads("default", delivered_below=told[0])
    origin.produce([b"a"], T0)
    three.step(T0)
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    taken = first.deliver_counted(int(now * 1e6)) or second.deliver_counted(int(now * 1e6))
    assert list(taken.values()) == [1]  # out with the survivor's consumer, not ACKed
    origin.up = True  # back: the takeover pauses and waits for that ACK
    now += 0.1
    three.step(now, heartbeat=True)
    assert [state.paused for node in (first, second)
            for state in node.core.takeovers.states.values()] == [True]
    for body in (b"b", b"c"):  # two batches: each survivor is first in line for one
        origin.produce([body], now)
    # delivered by the origin (seqs 1 and 2) and still out with its consumers
    assert list(origin.deliver_counted(int(now * 1e6)).values()) == [1, 1]
    told[0] = 3
    three.step(now, heartbeat=True)
    origin.up = False  # down again
    now += AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    counts = {**first.deliver_counted(int(now * 1e6)), **second.deliver_counted(int(now * 1e6))}
    assert counts == {message_key(origin.node_id, seq): 2 for seq in (1, 2)}


# -- every ACK removes every copy ------------------------------------------------------

def copies(node, origin) -> int:
    counted = node.core.replicas.counts[origin.node_id]
    stored = sum(1 for _ in node.store.iterate(keyspace.replica_prefix(origin.node_id)))
    assert counted == stored, (counted, stored)  # the figure never drifts from the truth
    return stored


def test_remove_in_the_same_wake_as_its_copy_leaves_nothing(tmp_path):
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    origin, holder = network.nodes
    origin.produce([b"a"], T0)
    (replicate,) = [item.frames for item in origin.core.take_outgoing()]
    seq = parse_message_key(origin.deliver(1)[0])[1]
    origin.ack(message_key(origin.node_id, seq), T0)
    (remove,) = [item.frames for item in origin.core.take_outgoing()]
    batch = holder.store.begin()  # both arrive in one wake of the holder
    for frames in (replicate, remove, remove):
        holder.core.receive_request(origin.endpoint.encode(), frames, batch, holder.own, T0)
    holder.store.commit(batch)
    assert copies(holder, origin) == 0
    network.close()


def test_remove_before_its_copy_drops_the_late_copy(tmp_path):
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    origin, holder = network.nodes
    origin.produce([b"a"], T0)
    (replicate,) = [item.frames for item in origin.core.take_outgoing()]
    origin.ack(origin.deliver(1)[0], T0)
    (remove,) = [item.frames for item in origin.core.take_outgoing()]
    for frames in (remove, replicate):  # reordered on the way
        batch = holder.store.begin()
        holder.core.receive_request(origin.endpoint.encode(), frames, batch, holder.own, T0)
        holder.store.commit(batch)
    assert copies(holder, origin) == 0
    network.close()


def test_a_lost_remove_is_sent_again_until_confirmed_also_after_a_restart(tmp_path):
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    origin, holder = network.nodes
    origin.produce([b"a", b"b"], T0)
    network.step(T0)
    network.cut.add((origin.endpoint, holder.endpoint))  # frames to the holder are lost
    for key in origin.deliver(1):
        origin.ack(key, T0)
    network.step(T0)
    assert copies(holder, origin) == 2
    assert origin.core.removes.owed_to(holder.endpoint) == 2

    # The origin restarts before the holder confirmed: the owed removes are stored.
    origin.close()
    network.nodes[0] = network.by_endpoint[origin.endpoint] = origin = type(origin)(
        tmp_path, origin.endpoint, (holder.endpoint,), 1, T0)
    assert origin.core.removes.owed_to(holder.endpoint) == 2
    network.heal()
    later = T0 + 1
    network.step(later, heartbeat=True)
    assert copies(holder, origin) == 0
    network.step(later)  # the confirmations are written with the next batch
    origin.store.commit(origin.store.begin())
    assert origin.core.removes.owed_to(holder.endpoint) == 0
    assert list(origin.store.iterate(keyspace.OWED_PREFIX)) == []
    network.close()


# -- one message delivered by one node at a time -------------------------------------

def test_any_frame_from_the_origin_stops_a_takeover(tmp_path):
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    origin, holder = network.nodes
    origin.produce([b"a"], T0)
    network.step(T0)
    network.cut.add((holder.endpoint, origin.endpoint))  # the holder's pings get lost
    now = T0 + AFTER_TIMEOUT
    holder.core.heartbeat(now, holder.own)  # the origin has said nothing for a while
    network.step(now)
    assert holder.core.takeovers.active_origins() == [origin.node_id]
    origin.produce([b"b"], now)  # but a copy arrives: the origin is alive
    network.step(now)
    assert holder.core.takeovers.active_origins() == []
    assert holder.deliver(2) == []
    network.close()


def test_a_node_cut_off_from_the_majority_does_not_take_over(three):
    origin, first, isolated = three.nodes
    origin.produce([b"a"], T0)
    three.step(T0)
    three.cut_off(isolated)
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    assert isolated.core.takeovers.active_origins() == []
    assert isolated.deliver(2) == []
    assert origin.deliver(2)  # the origin, on the majority side, delivers it


def test_a_returning_origin_leaves_alone_what_a_survivor_has_out(tmp_path):
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    origin, survivor = network.nodes
    origin.produce([b"a", b"b"], T0)
    network.step(T0)
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    network.step(now, heartbeat=True)
    out = survivor.deliver(2)
    assert len(out) == 2  # both out with the survivor's consumers, not answered yet

    origin.up = True
    back = now + 0.1
    network.step(back, heartbeat=True)
    assert survivor.core.takeovers.active_origins() == []
    assert origin.deliver(3) == []  # held by the survivor: not delivered twice
    assert survivor.ack(out[0], back)  # a late ACK at the survivor still counts
    network.step(back)
    assert origin.store.messages == 1
    # The other one times out at the survivor: the origin may deliver it now.
    expired_at = int((back + 2) * 1e6)
    survivor.core.takeovers.reap(expired_at)
    network.step(back + 0.2, heartbeat=True)
    assert [parse_message_key(key)[1] for key in origin.deliver(4)] == [
        parse_message_key(out[1])[1]]
    network.close()


def test_a_returning_origin_delivers_what_a_survivor_had_out_once_that_survivor_dies(
        tmp_path):
    """The origin skips what a survivor has out; when that survivor goes down with
    them, nobody can ACK them there, so the origin must look again (it read past
    them, and before this rule they stayed stored and undelivered for good)."""
    network = SimNetwork(tmp_path, 3, replicas=2, now=T0)
    network.step(T0, heartbeat=True)
    origin = network.nodes[0]
    origin.produce([b"a", b"b"], T0)
    network.step(T0)
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    network.step(now, heartbeat=True)
    delivering = [(node, out) for node in network.nodes[1:] if (out := node.deliver(2))]
    assert len(delivering) == 1  # the first live holder
    survivor, out = delivering[0]
    assert len(out) == 2

    origin.up = True
    back = now + 0.1
    network.step(back, heartbeat=True)
    assert origin.deliver(3) == []  # held by the survivor: not delivered twice
    survivor.up = False
    gone = back + AFTER_TIMEOUT
    network.step(gone, heartbeat=True)
    assert sorted(origin.deliver(4)) == sorted(out)
    network.close()


# -- a takeover serves default only what default reads ----------------------------------

def test_a_takeover_delivers_to_default_only_the_topics_it_reads(three):
    origin, first, second = three.nodes
    # as after REMOVE GROUP audit default, and DECLARE GROUP late default once late had
    # its group g
    reads = DefaultReads("default", {"audit": None, "late": 5}, {"late": (GroupReads("g"),)})
    origin.core.own_reads = lambda: reads
    origin.produce([b"o1", b"o2"], T0)  # seqs 0, 1: the default topic
    origin.produce([b"a1", b"a2"], T0, headers=(b"TOPIC:audit",))  # 2, 3: never default's
    origin.produce([b"l1", b"l2"], T0, headers=(b"TOPIC:late",))  # 4, 5: default's from 5
    three.step(T0)
    for holder in (first, second):
        assert holder.core.replicas.default_reads[origin.node_id] == reads
        assert ReplicaStore(holder.store).default_reads[origin.node_id] == reads  # stored
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    delivered = {node.endpoint: node.deliver(2) for node in (first, second)}
    keys = sorted(key for sent in delivered.values() for key in sent)
    assert keys == [message_key(origin.node_id, seq) for seq in (0, 1, 5)]
    for endpoint, sent in delivered.items():
        for key in sent:
            assert three.by_endpoint[endpoint].ack(key, now)
    three.step(now)
    for holder in (first, second):  # the rest stays for the origin's named groups
        assert copies(holder, origin) == 4
        assert holder.deliver(3) == []


def test_a_holder_told_nothing_delivers_every_copy_as_before(three):
    origin, first, second = three.nodes
    origin.produce([b"a1"], T0, headers=(b"TOPIC:audit",))
    three.step(T0)
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    assert len(first.deliver(2) + second.deliver(2)) == 1


def test_a_node_may_describe_only_its_own_topics(three):
    origin, first, second = three.nodes
    forged = cw.encode_topics(second.node_id, DefaultReads("default", {"orders": None}))
    batch = origin.store.begin()  # first speaks for second
    origin.core.receive_request(first.endpoint.encode(), forged, batch, origin.own, T0)
    origin.store.commit(batch)
    assert origin.core.rejected == 1
    assert origin.core.replicas.default_reads[second.node_id] == DefaultReads("default")


# -- a takeover serves every group; the returning origin learns what each finished ------

ORDERS = DefaultReads("default", groups={"orders": (GroupReads("g1"),
                                                    GroupReads("g2", 0, "eu-*"))})


def seq_of(key: bytes) -> int:
    return parse_message_key(key)[1]


def serve(nodes, states_of, now_us: int) -> dict[int, object]:
    """Deliver from each node's states; returns which node sent each seq."""
    return {seq_of(key): node for node in nodes for key in node.deliver(now_us, states_of(node))}


def test_a_takeover_serves_every_group_what_it_holds_and_tells_the_origin(three):
    origin, first, second = three.nodes
    origin.core.own_reads = lambda: ORDERS
    origin.produce([b"e1", b"e2"], T0, headers=(b"TOPIC:orders", b"TAG:eu-1"))  # 0, 1
    origin.produce([b"u1"], T0, headers=(b"TOPIC:orders", b"TAG:us-1"))  # 2
    three.step(T0)
    batch = origin.store.begin()  # g1 finished seq 0 at the origin: holders mark it
    origin.core.done_own("g1", [0])
    origin.core.owe_removes(batch, T0)
    origin.store.commit(batch)
    origin.core.flush_removes(T0)
    three.step(T0)
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    now_us = int(now * 1e6)
    survivors = (first, second)
    served = {group: serve(survivors, lambda node, g=group: list(
        node.core.takeovers.taken("orders", g).values()), now_us) for group in ("g1", "g2")}
    served["default"] = serve(survivors, lambda node: node.core.takeovers.active(), now_us)
    assert {group: sorted(seqs) for group, seqs in served.items()} == {
        "g1": [1, 2], "g2": [0, 1], "default": [0, 1, 2]}
    for group in ("g1", "g2"):  # named groups first: the copies stay for default
        for seq, node in served[group].items():
            assert node.ack_group(origin.node_id, seq, "orders", group, now)
    three.step(now)
    assert copies(first, origin) == copies(second, origin) == 3
    for seq, node in served["default"].items():
        assert node.ack(message_key(origin.node_id, seq), now)
    three.step(now)
    assert copies(first, origin) == copies(second, origin) == 0
    # the origin returns: every DONE reaches it, and default's last ACKs as tombstones
    done: dict[str, set[int]] = {"g1": set(), "g2": set()}
    origin.hub.subscribe(GroupDoneElsewhere, lambda event: done[event.group].update(event.seqs))
    origin.up = True
    for step in range(3):
        three.step(now + 0.1 * (step + 1), heartbeat=True)
    assert done == {"g1": {1, 2}, "g2": {0, 1}}
    assert origin.store.messages == 0
    assert all(node.core.removes.owed_to(origin.endpoint) == 0 for node in survivors)


def test_an_origin_outside_the_runs_nodes_learns_what_each_group_finished(three):
    """Three shards, then two (shard 2's store unused, its copies taken over), then
    three: the survivors keep its groups' dones by its node id, across their restart,
    and give them to it when it is heard again."""
    origin_endpoint = three.nodes[0].endpoint
    origin = three.nodes[0]
    origin.core.own_reads = lambda: ORDERS
    origin.produce([b"e1", b"e2"], T0, headers=(b"TOPIC:orders", b"TAG:eu-1"))  # 0, 1
    origin.produce([b"u1"], T0, headers=(b"TOPIC:orders", b"TAG:us-1"))  # 2
    three.step(T0, heartbeat=True)
    origin_id = origin.node_id
    survivors = three.run([node.endpoint for node in three.nodes[1:]], 1, T0 + 1)
    now = T0 + 1 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    now_us = int(now * 1e6)
    for group in ("g1", "g2"):
        served = serve(survivors, lambda node, g=group: list(
            node.core.takeovers.taken("orders", g).values()), now_us)
        assert sorted(served) == ([0, 1, 2] if group == "g1" else [0, 1])
        for seq, node in served.items():
            assert node.ack_group(origin_id, seq, "orders", group, now)
    three.step(now)
    # three again, the survivors' stores reopened (as after a SIGKILL: all is written)
    nodes = three.run([origin_endpoint, *(node.endpoint for node in survivors)], 2, now)
    origin = nodes[0]
    origin.core.own_reads = lambda: ORDERS
    done: dict[str, set[int]] = {"g1": set(), "g2": set()}
    origin.hub.subscribe(GroupDoneElsewhere, lambda event: done[event.group].update(event.seqs))
    for step in range(3):
        three.step(now + 0.1 * (step + 1), heartbeat=True)
    assert done == {"g1": {0, 1, 2}, "g2": {0, 1}}
    assert all(not node.core.removes.entries for node in nodes[1:])  # every DONE confirmed


def test_a_done_read_in_the_wake_of_its_copy_is_not_served_again_by_a_takeover(three):
    """A busy holder reads the copy and, in the same wake, the DONE of a group that
    ACKed the message at the origin at once: the copy is marked all the same."""
    origin, first, second = three.nodes
    origin.core.own_reads = lambda: ORDERS
    origin.produce([b"e1"], T0, headers=(b"TOPIC:orders", b"TAG:eu-1"))  # copies queued
    batch = origin.store.begin()
    origin.core.done_own("g1", [0])
    origin.core.owe_removes(batch, T0)
    origin.store.commit(batch)
    origin.core.flush_removes(T0)  # the DONE follows the copies on each link
    three.step_in_one_wake(T0)
    assert copies(first, origin) == copies(second, origin) == 1  # kept for g2, default
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    survivors = (first, second)
    served = {group: serve(survivors, lambda node, g=group: list(
        node.core.takeovers.taken("orders", g).values()), int(now * 1e6))
        for group in ("g1", "g2")}
    assert {group: sorted(seqs) for group, seqs in served.items()} == {"g1": [], "g2": [0]}


def test_a_group_done_at_the_origin_is_not_served_again_by_a_takeover(three):
    origin, first, second = three.nodes
    origin.core.own_reads = lambda: ORDERS
    origin.produce([b"e1"], T0, headers=(b"TOPIC:orders", b"TAG:eu-1"))
    three.step(T0)
    (key,) = origin.deliver(1)  # default acks at the origin while g1 and g2 hold it
    batch = origin.store.begin()
    origin.own.ack(batch, 0)
    origin.core.done_own("default", [0])
    origin.core.owe_removes(batch, T0)
    origin.store.commit(batch)
    origin.core.flush_removes(T0)
    three.step(T0)
    assert copies(first, origin) == copies(second, origin) == 1  # kept for g1 and g2
    origin.up = False
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    assert first.deliver(int(now * 1e6)) + second.deliver(int(now * 1e6)) == []
