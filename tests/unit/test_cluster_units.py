"""Cluster frame layouts, peer liveness and the replication tracker, with time passed in."""

from __future__ import annotations

import pytest
import structlog

from pzq.cluster.figures import peer_state
from pzq.cluster.peers import PeerTable
from pzq.cluster.protocols import PeerProtocols
from pzq.cluster.removes import RemoveLedger, absent_peer
from pzq.cluster.replication import ReplicationTracker
from pzq.errors import DecodeError
from pzq.protocol import cluster as cw
from pzq.protocol.routing import CLUSTER_PROTOCOL, Routing
from pzq.store import keyspace, record
from pzq.store.replicas import ReplicaStore, encode_holders, split_value
from pzq.store.store import Store
from tests.support.cluster_sim import SimNetwork

pytestmark = pytest.mark.timeout(10)
NODE = b"0a1b2c3d"


def test_cluster_frames_round_trip():
    assert cw.decode_ping(cw.encode_ping(NODE, "ipc:///x")) == (NODE, "ipc:///x")
    assert cw.decode_pong(cw.encode_pong(NODE, [1, 2**40], True, [7])) == cw.Pong(
        NODE, [1, 2**40], True, [7])
    replicate = cw.decode_replicate(cw.encode_replicate(NODE, 9, b"\x00", [(1, b"a"), (5, b"")]))
    assert (replicate.origin, replicate.batch_id, replicate.messages) == (NODE, 9,
                                                                          [(1, b"a"), (5, b"")])
    assert cw.decode_replicated(cw.encode_replicated(2**63)) == 2**63
    assert cw.decode_remove(cw.encode_remove(NODE, 12, [3, 4])) == (NODE, 12, [3, 4])
    assert cw.decode_removed(cw.encode_removed(12)) == 12
    assert cw.decode_applied(cw.encode_applied([])) == []
    reads = cw.DefaultReads("main", {"audit": None, "orders": 7})
    assert cw.decode_topics(cw.encode_topics(NODE, reads)) == (NODE, reads)
    assert cw.decode_topics([cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {},'
                             b' "later": 1}']) == (NODE, cw.DefaultReads("d"))  # ignored
    grouped = cw.DefaultReads("main", {}, {"orders": (cw.GroupReads("g1", 3, "eu-*"),)})
    assert cw.decode_topics(cw.encode_topics(NODE, grouped)) == (NODE, grouped)
    assert cw.decode_done(cw.encode_done(NODE, 5, "g1", [1, 9])) == (NODE, 5, "g1", [1, 9])
    assert cw.decode_noted(cw.encode_noted(5)) == 5
    assert cw.decode_leaving(cw.encode_leaving(NODE)) == NODE


def test_topics_from_a_node_that_predates_groups_names_none():
    old = b'{"default_from": {"audit": null}, "default_topic": "main"}'
    origin, reads = cw.decode_topics([cw.TOPICS, NODE, old])
    assert reads == cw.DefaultReads("main", {"audit": None}) and reads.groups == {}
    assert reads.holders("orders", 0, b"") == ["default"]  # a takeover serves default only
    assert reads.holders("audit", 0, b"") == []


def test_topics_say_how_far_each_groups_deliveries_went():
    reads = cw.DefaultReads("main", groups={"orders": (cw.GroupReads("g1", 0, "", 40),)},
                            delivered_below=12)
    origin, decoded = cw.decode_topics(cw.encode_topics(NODE, reads))
    assert decoded == reads and decoded.group("orders", "g1").delivered_below == 40
    old = b'{"default_from": {}, "default_topic": "main", "groups": {"orders": ' \
          b'[{"name": "g1", "start_seq": 0, "filter": ""}]}}'
    assert cw.decode_topics([cw.TOPICS, NODE, old])[1].group("orders", "g1") \
        == cw.GroupReads("g1")  # a node from before counts were kept: 0
    for bad in (b'"delivered_below": -1', b'"delivered_below": "x"'):
        with pytest.raises(DecodeError, match="delivered_below"):
            cw.decode_topics([cw.TOPICS, NODE, b'{"default_from": {}, '
                              b'"default_topic": "main", ' + bad + b"}"])


def test_what_default_reads_of_a_nodes_topics():
    reads = cw.DefaultReads("main", {"audit": None, "orders": 7})
    assert reads.holders("main", 0, b"") == reads.holders("clicks", 0, b"") == ["default"]
    assert reads.holders("audit", 100, b"") == []
    kept = cw.DefaultReads("main", {"orders": 7}, {"orders": (cw.GroupReads("g"),)})
    assert kept.holders("orders", 6, b"") == ["g"]  # declared for it from 7 on
    assert kept.holders("orders", 7, b"") == ["g", "default"]


def test_which_groups_hold_a_message_of_a_nodes_topic():
    reads = cw.DefaultReads("main", {"audit": None}, {
        "orders": (cw.GroupReads("all"), cw.GroupReads("eu", 0, "eu-*"),
                   cw.GroupReads("late", 5, "x"))})
    assert reads.holders("orders", 0, b"eu-1") == ["all", "eu", "default"]
    assert reads.holders("orders", 6, b"x") == ["all", "late", "default"]
    assert reads.holders("orders", 4, b"x") == ["all", "default"]
    assert reads.holders("clicks", 0, b"eu-1") == ["default"]
    assert reads.group("orders", "eu") == cw.GroupReads("eu", 0, "eu-*")
    assert reads.group("clicks", "eu") is None


@pytest.mark.parametrize("decode, frames", [
    (cw.decode_ping, [cw.PING, NODE]),
    (cw.decode_ping, [cw.PING, b"NOTHEX!!", b"ipc:///x"]),
    (cw.decode_pong, [cw.PONG, NODE, b"2", b"", b""]),
    (cw.decode_pong, [cw.PONG, NODE, b"0", b"\x00" * 7, b""]),
    (cw.decode_pong, [cw.PONG, NODE, b"0", b""]),
    (cw.decode_replicate, [cw.REPLICATE, NODE, b"\x00" * 8, b"\x00", b"\x00" * 8]),
    (cw.decode_replicate, [cw.REPLICATE, NODE, b"\x00" * 7, b"\x00", b"\x00" * 8, b"v"]),
    (cw.decode_replicate, [cw.REPLICATE, NODE, b"\x00" * 8, b"\x00", b"\x00" * 3, b"v"]),
    (cw.decode_replicated, [cw.REPLICATED, b"\x00"]),
    (cw.decode_remove, [cw.REMOVE, NODE]),
    (cw.decode_remove, [cw.REMOVE, NODE, b"\x00" * 3, b""]),
    (cw.decode_removed, [cw.REMOVED]),
    (cw.decode_applied, [cw.APPLIED, b"\x00" * 9]),
    (cw.decode_topics, [cw.TOPICS, NODE]),
    (cw.decode_topics, [cw.TOPICS, NODE, b"not json"]),
    (cw.decode_topics, [cw.TOPICS, NODE, b"[]"]),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_from": {}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {"a": -1}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {"a": "1"}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {"a": true}}']),
    (cw.decode_topics, [cw.TOPICS, b"NOTHEX!!", b'{"default_topic": "d", "default_from": {}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {},'
                        b' "groups": []}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {},'
                        b' "groups": {"t": {}}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {},'
                        b' "groups": {"t": [{"name": "g"}]}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {},'
                        b' "groups": {"t": [{"name": 1, "start_seq": 0}]}}']),
    (cw.decode_topics, [cw.TOPICS, NODE, b'{"default_topic": "d", "default_from": {},'
                        b' "groups": {"t": [{"name": "g", "start_seq": 0, "filter": 2}]}}']),
    (cw.decode_done, [cw.DONE, NODE, b"\x00" * 8, b"g1"]),
    (cw.decode_done, [cw.DONE, NODE, b"\x00" * 7, b"g1", b""]),
    (cw.decode_done, [cw.DONE, NODE, b"\x00" * 8, b"", b""]),
    (cw.decode_done, [cw.DONE, NODE, b"\x00" * 8, b"\xff", b""]),
    (cw.decode_done, [cw.DONE, NODE, b"\x00" * 8, b"g1", b"\x00" * 3]),
    (cw.decode_noted, [cw.NOTED, b"\x00"]),
    (cw.decode_leaving, [cw.LEAVING]),
    (cw.decode_leaving, [cw.LEAVING, b"NOTHEX!!"]),
])
def test_cluster_frame_garbage(decode, frames):
    with pytest.raises(DecodeError):
        decode(frames)


def test_holder_lists():
    holders = (b"aaaaaaaa", b"bbbbbbbb")
    assert split_value(encode_holders(holders) + b"record") == (holders, b"record")
    with pytest.raises(DecodeError):
        split_value(b"\x02aaaaaaaa")


def test_peer_liveness_from_heartbeats():
    peers = PeerTable(("tcp://a:1", "tcp://b:1"), timeout_nodes_s=1.0, now=100.0)
    assert peers.in_grace(100.5) and peers.node_alive(b"anything", 100.5)
    assert peers.heard("tcp://a:1", NODE, 100.2) is True
    assert peers.heard("tcp://a:1", NODE, 100.4) is False
    assert not peers.in_grace(101.0)
    assert peers.node_alive(NODE, 101.0) and not peers.node_alive(b"ffffffff", 101.0)
    assert [p.endpoint for p in peers.refresh(101.3)] == []
    assert [p.endpoint for p in peers.refresh(101.5)] == ["tcp://a:1"]
    assert not peers.node_alive(NODE, 101.5)
    assert peers.endpoint_of(NODE) == "tcp://a:1"


def test_stats_tells_a_peer_that_left_from_one_gone_silent_until_it_pings_again():
    """STATS peers[].state: ``left`` for a peer that said LEAVING (stopped by SIGTERM),
    also past --timeout-nodes; ``down`` for one silent without a word."""
    peers = PeerTable(("tcp://a:1", "tcp://b:1"), timeout_nodes_s=1.0, now=100.0)
    leaving, silent = peers.peers["tcp://a:1"], peers.peers["tcp://b:1"]
    assert [peer_state(leaving), peer_state(silent)] == ["down", "down"]  # never heard
    peers.answered("tcp://a:1", NODE, 100.5)
    peers.heard("tcp://b:1", b"ffffffff", 100.5)
    assert [peer_state(leaving), peer_state(silent)] == ["up", "unreachable"]
    peers.left("tcp://a:1")
    peers.refresh(102.0)
    assert [peer_state(leaving), peer_state(silent)] == ["left", "down"]
    peers.pinged("tcp://a:1")  # back: its PING counts it up
    peers.heard("tcp://a:1", NODE, 103.0)
    assert peer_state(leaving) == "unreachable"  # up; its link answers soon after
    peers.refresh(105.0)
    assert peer_state(leaving) == "down"  # silent again, without a word this time


def test_a_peer_that_leaves_is_down_at_once_but_not_taken_over_before_its_timer():
    peers = PeerTable(("tcp://a:1", "tcp://b:1", "tcp://c:1"), timeout_nodes_s=1.0, now=100.0)
    for endpoint, node in (("tcp://a:1", NODE), ("tcp://b:1", b"ffffffff")):
        peers.answered(endpoint, node, 101.0)
    assert peers.left("tcp://a:1") is True
    a = peers.peers["tcp://a:1"]
    assert not a.up and not a.reachable and peers.reachable_peers() == [peers.peers["tcp://b:1"]]
    assert peers.left("tcp://a:1") is False  # said once
    assert peers.refresh(101.5) == []  # down already: not down again
    # A takeover waits as long as for a silent peer, quorum included
    assert peers.node_alive(NODE, 101.9) and peers.quorum(101.9)
    assert not peers.node_alive(NODE, 102.1)
    peers.pinged("tcp://a:1")  # back: its frames count again
    assert peers.heard("tcp://a:1", NODE, 102.2) is True and peers.node_alive(NODE, 102.2)


def test_replication_confirms_after_enough_copies():
    tracker = ReplicationTracker(replicas=2, timeout_replication_s=0.1)
    ids = tracker.track([(b"r", b"m1"), (b"r", b"m2")], ["a", "b"], now=10.0)
    assert tracker.lag == {"a": 2, "b": 2}
    assert tracker.confirm(ids["a"], "a") == []
    assert tracker.confirm(ids["a"], "a") == []  # a duplicate counts once
    assert tracker.confirm(ids["b"], "a") == []  # another peer's batch id counts not
    done = tracker.confirm(ids["b"], "b")
    assert [ack.msg_id for ack in done] == [b"m1", b"m2"]
    assert tracker.expire(11.0) == [] and tracker.failures == 0


def test_replication_fails_exactly_at_the_deadline():
    tracker = ReplicationTracker(replicas=2, timeout_replication_s=0.1)
    ids = tracker.track([(b"r", b"m1")], ["a"], now=10.0)  # only one live peer
    tracker.confirm(ids["a"], "a")
    assert tracker.next_deadline() == pytest.approx(10.1)
    assert tracker.expire(10.09) == []
    assert [ack.msg_id for ack in tracker.expire(10.1)] == [b"m1"]
    assert tracker.failures == 1 and tracker.next_deadline() is None


def test_owed_removes_and_dones_outlive_a_restart(tmp_path):
    store = Store.open(tmp_path / "db")
    ledger = RemoveLedger(store, ("a", "b"), resend_s=1.0)
    batch = store.begin()
    ledger.owe(batch, NODE, [1, 2], {"a", "b"})
    ledger.owe(batch, NODE, [3], {"a"}, group="g1")
    store.commit(batch)
    store.close()
    store = Store.open(tmp_path / "db")
    ledger = RemoveLedger(store, ("a",), resend_s=1.0)  # b left the cluster
    assert sorted(ledger.due("a", 10.0)) == sorted([cw.encode_remove(NODE, 0, [1, 2]),
                                                     cw.encode_done(NODE, 1, "g1", [3])])
    assert ledger.unconfirmed(NODE, "a") == {1, 2, 3}
    ledger.confirmed("a", 1)  # NOTED
    batch = store.begin()
    ledger.prepare(batch)
    store.commit(batch)
    assert ledger.owed_to("a") == 2
    assert [key for key, _ in store.iterate(keyspace.OWED_DONE_PREFIX)] == []
    store.close()


def test_a_done_owed_to_an_absent_origin_outlives_a_restart_and_goes_where_it_is_heard(
        tmp_path):
    """An origin outside --nodes (a shard store a run with fewer shards left unused) is
    owed its groups' dones by its node id; once heard, at its endpoint."""
    store = Store.open(tmp_path / "db")
    ledger = RemoveLedger(store, ("a",), resend_s=1.0)
    batch = store.begin()
    ledger.owe(batch, NODE, [3, 4], {"a", absent_peer(NODE)}, group="g1")
    store.commit(batch)
    ledger.confirmed("a", 0)
    batch = store.begin()
    ledger.prepare(batch)
    store.commit(batch)
    store.close()
    store = Store.open(tmp_path / "db")
    ledger = RemoveLedger(store, ("a", "c"), resend_s=1.0)  # the origin back, at c
    assert ledger.absent == {NODE} and ledger.due("c", 10.0) == []
    assert ledger.unconfirmed(NODE, "c") == set()
    ledger.found(NODE, "c")
    assert ledger.absent == set()
    assert ledger.unconfirmed(NODE, "c") == {3, 4}  # held back by the origin meanwhile
    assert ledger.due("c", 10.0) == [cw.encode_done(NODE, 0, "g1", [3, 4])]
    batch = store.begin()
    ledger.prepare(batch)  # the endpoint in its name's place, on disk too
    store.commit(batch)
    store.close()
    store = Store.open(tmp_path / "db")
    ledger = RemoveLedger(store, ("a", "c"), resend_s=1.0)
    assert ledger.absent == set() and ledger.owed_to("c") == 2
    ledger.confirmed("c", 0)  # NOTED
    batch = store.begin()
    ledger.prepare(batch)
    store.commit(batch)
    assert [key for key, _ in store.iterate(keyspace.OWED_DONE_PREFIX)] == []
    store.close()


def test_a_copy_goes_when_every_group_holding_it_is_done(tmp_path):
    store = Store.open(tmp_path / "db")
    replicas = ReplicaStore(store)
    reads = cw.DefaultReads("main", {}, {"orders": (cw.GroupReads("g1"),
                                                    cw.GroupReads("eu", 0, "eu-*"))})

    def commit(change) -> object:
        batch = store.begin()
        result = change(batch)
        store.commit(batch)
        replicas.written()
        return result

    commit(lambda batch: replicas.describe_topics(batch, NODE, reads))
    eu = record.encode(b"m", (b"TOPIC:orders", b"TAG:eu-1"), (b"a",), 1)
    us = record.encode(b"m", (b"TOPIC:orders", b"TAG:us-1"), (b"b",), 1)
    commit(lambda batch: [replicas.add(batch, NODE, seq, (NODE,), value)
                          for seq, value in ((0, eu), (1, us))])
    assert replicas.holding_groups(NODE, 0, eu) == ["g1", "eu", "default"]
    assert replicas.holding_groups(NODE, 1, us) == ["g1", "default"]
    assert not replicas.group_holds(NODE, 1, us, "eu", "orders")
    assert not replicas.group_holds(NODE, 0, eu, "g1", "clicks")  # another topic's g1
    assert commit(lambda batch: replicas.group_done(batch, NODE, 0, "g1", False)) is False
    assert replicas.is_done(NODE, 0, "g1") and not replicas.group_holds(NODE, 0, eu, "g1")
    assert commit(lambda batch: replicas.group_done(batch, NODE, 0, "default", True)) is False
    assert replicas.would_release(NODE, 0, "eu")
    assert commit(lambda batch: replicas.group_done(batch, NODE, 0, "eu", False)) is True
    assert replicas.get(NODE, 0) is None and replicas.tombstones[NODE] == 0
    assert [key for key, _ in store.iterate(keyspace.REPLICA_DONE_PREFIX)] == []  # marks go
    assert commit(lambda batch: replicas.group_done(batch, NODE, 1, "g1", False)) is False
    assert commit(lambda batch: replicas.group_done(batch, NODE, 1, "default", True)) is True
    assert replicas.tombstones[NODE] == 1  # default was last: the origin hears it so
    assert replicas.counts[NODE] == 0
    store.close()


def test_a_done_read_in_the_wake_that_brought_its_copy_marks_the_copy(tmp_path):
    """A busy holder reads the REPLICATE and the DONE that follows it (an ACK at the
    origin at once) in one wake: the mark was skipped ("not here yet"), and after the
    origin's fall a takeover served the group again what it had ACKed."""
    store = Store.open(tmp_path / "db")
    replicas = ReplicaStore(store)
    value = record.encode(b"m", (b"TOPIC:orders",), (b"a",), 1)
    batch = store.begin()
    replicas.describe_topics(batch, NODE, cw.DefaultReads("main", {}, {
        "orders": (cw.GroupReads("g1"), cw.GroupReads("g2"))}))
    replicas.add(batch, NODE, 0, (NODE,), value)
    assert replicas.group_done(batch, NODE, 0, "g1", False) is False  # g2 holds it
    store.commit(batch)
    replicas.written()
    assert replicas.is_done(NODE, 0, "g1")
    assert not replicas.group_holds(NODE, 0, value, "g1", "orders")
    assert replicas.group_holds(NODE, 0, value, "g2", "orders")
    batch = store.begin()
    replicas.add(batch, NODE, 1, (NODE,), value)
    assert replicas.group_done(batch, NODE, 1, "g1", False) is False
    assert replicas.group_done(batch, NODE, 1, "g2", False) is False  # default holds it
    assert replicas.group_done(batch, NODE, 1, "default", True) is True  # the last
    assert replicas.get(NODE, 1) is None
    store.commit(batch)
    replicas.written()
    assert replicas.counts[NODE] == 1 and replicas.get(NODE, 1) is None
    assert [key for key, _ in store.iterate(keyspace.REPLICA_DONE_PREFIX)] == [
        keyspace.replica_done_key(NODE, 0, "g1")]
    store.close()


def test_a_copy_whose_seq_ends_in_255_is_removed_with_its_marks(tmp_path):
    store = Store.open(tmp_path / "db")
    replicas = ReplicaStore(store)
    batch = store.begin()
    replicas.describe_topics(batch, NODE, cw.DefaultReads("main", {}, {
        "orders": (cw.GroupReads("g1"),)}))
    value = record.encode(b"m", (b"TOPIC:orders",), (b"a",), 1)
    for seq in (255, 256):
        replicas.add(batch, NODE, seq, (NODE,), value)
    store.commit(batch)
    replicas.written()
    batch = store.begin()
    assert replicas.group_done(batch, NODE, 255, "g1", False) is False  # default holds it
    store.commit(batch)
    batch = store.begin()
    assert replicas.remove(batch, NODE, 255, tombstone=False)  # a REMOVE: marks go too
    store.commit(batch)
    assert [key for key, _ in store.iterate(keyspace.REPLICA_DONE_PREFIX)] == []
    assert replicas.get(NODE, 256) is not None
    store.close()


def test_a_remove_of_many_copies_is_a_remove_of_each(tmp_path):
    """REMOVE of many seqs at once (in bulk): the copies held go and are counted once,
    a seq given twice or a copy that has not come yet is handled one by one (the late
    copy is dropped when it comes), and a down origin gets its tombstones."""
    store = Store.open(tmp_path / "db")
    replicas = ReplicaStore(store)
    value = record.encode(b"m", (), (b"a",), 1)
    batch = store.begin()
    for seq in range(10):
        replicas.add(batch, NODE, seq, (NODE,), value)
    store.commit(batch)
    replicas.written()
    batch = store.begin()
    replicas.remove_all(batch, NODE, [0, 1, 2], tombstone=False)  # from the store
    replicas.add(batch, NODE, 10, (NODE,), value)
    replicas.remove_all(batch, NODE, [3, 10], tombstone=False)  # one put in this batch
    replicas.remove_all(batch, NODE, [4, 4], tombstone=False)  # twice
    replicas.remove_all(batch, NODE, [5, 11], tombstone=False)  # 11 comes later
    replicas.remove_all(batch, NODE, [6, 7], tombstone=True)  # its origin is down
    store.commit(batch)
    replicas.written()
    batch = store.begin()
    assert not replicas.add(batch, NODE, 11, (NODE,), value)  # removed before it came
    store.commit(batch)
    replicas.written()
    assert [seq for seq in range(12) if replicas.holds(NODE, seq)] == [8, 9]
    assert replicas.counts[NODE] == 2
    assert replicas.tombstones[NODE] == 2
    store.close()


def test_a_peer_that_reconnects_often_leaves_two_routing_ids_known(tmp_path):
    """Each reconnect is a new routing id on the ROUTER: the table kept every one."""
    network = SimNetwork(tmp_path, 3, replicas=1)
    node, peer = network.nodes[0], network.nodes[1]
    ping = cw.encode_ping(peer.node_id, peer.endpoint)
    batch = node.store.begin()
    for connection in range(1000):
        node.core.receive_request(b"connection %d" % connection, ping, batch, node.own, 1000.0)
    node.store.commit(batch)
    assert len(node.core.senders) == 2
    assert node.core.senders.get(b"connection 999") == (peer.endpoint, peer.node_id)
    assert node.core.senders.get(b"connection 998") == (peer.endpoint, peer.node_id)
    assert node.core.senders.get(b"connection 997") is None
    network.close()


def test_topics_say_which_topics_default_holds_only_unclaimed_messages_of():
    reads = cw.DefaultReads("main", groups={"orders": (cw.GroupReads("eu", 0, "eu-*"),)},
                            unclaimed=("orders",))
    assert cw.decode_topics(cw.encode_topics(NODE, reads))[1] == reads
    assert reads.holders("orders", 3, b"eu-west") == ["eu"]
    assert reads.holders("orders", 3, b"us") == ["default"]  # no named group takes it
    kept = cw.DefaultReads("main", groups={"orders": (cw.GroupReads("eu", 0, "eu-*"),)})
    assert kept.holders("orders", 3, b"eu-west") == ["eu", "default"]
    with pytest.raises(DecodeError, match="default_unclaimed"):
        cw.decode_topics([cw.TOPICS, NODE, b'{"default_from": {}, "default_topic": "main", '
                          b'"default_unclaimed": [1]}'])


def test_a_peer_of_another_protocol_is_said_once_and_again_when_it_changes():
    protocols = PeerProtocols()
    with structlog.testing.capture_logs() as logged:
        for protocol in (CLUSTER_PROTOCOL + 1, CLUSTER_PROTOCOL + 1, CLUSTER_PROTOCOL,
                         CLUSTER_PROTOCOL, 1, 1):
            protocols.heard("tcp://b:1", protocol)
        protocols.heard("tcp://c:1", CLUSTER_PROTOCOL)
    assert [(line["event"], line["peer_protocol"]) for line in logged] == [
        ("peer_protocol_newer", CLUSTER_PROTOCOL + 1), ("peer_protocol_older", 1)]
    assert protocols.spoken == {"tcp://b:1": 1, "tcp://c:1": CLUSTER_PROTOCOL}


@pytest.mark.parametrize("forged", [
    lambda other: cw.encode_replicate(other, 1, b"\x00", [(1, b"copy")]),
    lambda other: cw.encode_schedule(other, 1, b"\x00", [(1, 2**50, b"copy")]),
    lambda other: cw.encode_topics(other, cw.DefaultReads("main", {})),
    lambda other: cw.encode_routing(other, Routing()),
], ids=["replicate", "schedule", "topics", "routing"])
def test_a_peer_that_speaks_for_another_node_is_refused(tmp_path, forged):
    """A peer's frames name their origin: one naming another node's is refused
    (counted, its reason logged), not stored under that node, and not confirmed."""
    network = SimNetwork(tmp_path, 3, replicas=1)
    node, peer, other = network.nodes
    batch = node.store.begin()
    node.core.receive_request(b"peer", cw.encode_ping(peer.node_id, peer.endpoint), batch,
                              node.own, 1000.0)
    node.core.take_outgoing()  # the PONG
    with structlog.testing.capture_logs() as logs:
        node.core.receive_request(b"peer", forged(other.node_id), batch, node.own, 1000.0)
    node.store.commit(batch)
    assert node.core.rejected == 1
    assert [entry["reason"] for entry in logs if entry["event"] == "cluster_frame_rejected"
            ][0].startswith(("a node may only replicate its own", "a node may only describe"))
    assert node.core.take_outgoing() == []
    assert list(node.store.iterate(keyspace.REPLICA_PREFIX)) == []
    assert list(node.store.iterate(keyspace.SCHEDULED_COPY_PREFIX)) == []
    network.close()


def test_only_a_peer_host_without_an_address_is_unresolved():
    """A literal address (IPv4, IPv6, with a scope) and an ipc endpoint are not looked
    up; a name under .invalid (RFC 2606) has no address; a source address is not the
    peer's host."""
    from pzq.cluster.hosts import unresolved
    assert unresolved(["tcp://127.0.0.1:1", "tcp://[::1]:1", "tcp://[fe80::1%lo]:1",
                       "ipc:///nowhere/peer"]) == {}
    found = unresolved(["tcp://peer.invalid:1", "tcp://127.0.0.1;other.invalid:2"])
    assert {endpoint: host for endpoint, (host, _) in found.items()} == {
        "tcp://peer.invalid:1": "peer.invalid", "tcp://127.0.0.1;other.invalid:2": "other.invalid"}
    assert all(why.startswith("it does not resolve (") for _, why in found.values())


def test_a_peers_handshake_refusal_is_said_once_per_reason_and_a_hang_up_needs_two_ticks():
    """Ten retries a second end alike: one warning; a hang-up, which races the peer's
    own refusal, is said only at a second tick without one, and never over a refusal;
    a handshake taken forgets the reason, so that a later refusal is said again."""
    import zmq

    from pzq.cluster.handshakes import PeerHandshakes, refusal
    peers = PeerTable(("tcp://a:1",), timeout_nodes_s=1.0, now=0.0)
    watch = PeerHandshakes(peers, curve=True, own_keys=True)
    auth = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)
    hung_up = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 0)
    taken = (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
    refused, vague = refusal(*auth, True, True), refusal(*hung_up, True, True)
    with structlog.testing.capture_logs() as logged:
        watch._ended("tcp://a:1", [hung_up, hung_up])
        assert peers.peers["tcp://a:1"].handshake_refused == ""  # one tick: not yet
        watch._ended("tcp://a:1", [hung_up, auth, hung_up])
        watch._ended("tcp://a:1", [auth] * 10)
        watch._ended("tcp://a:1", [hung_up])
        watch._ended("tcp://a:1", [hung_up])
        assert peers.peers["tcp://a:1"].handshake_refused == refused
        watch._ended("tcp://a:1", [auth, taken])
        assert peers.peers["tcp://a:1"].handshake_refused == ""
        watch._ended("tcp://a:1", [hung_up])
        watch._ended("tcp://a:1", [hung_up])
    assert [(entry["event"], entry["reason"]) for entry in logged] == [
        ("peer_handshake_refused", refused), ("peer_handshake_refused", vague)]
    assert "(ZAP status 400)" in refused and "--cluster-authorized-keys" in refused


def test_a_leaving_peer_is_counted_down_and_up_again_only_by_its_next_ping(tmp_path):
    """LEAVING counts its sender down at once (said once); a PONG of the stopping
    process still on its way neither counts it up nor holds messages again; its next
    PING (the node back) does. It goes only to peers that said protocol 4 or later."""
    network = SimNetwork(tmp_path, 3, replicas=1)
    node, peer, other = network.nodes
    core = node.core
    batch = node.store.begin()
    core.receive_request(b"peer", cw.encode_ping(peer.node_id, peer.endpoint), batch,
                         node.own, 1000.0)
    core.receive_reply(peer.endpoint, cw.encode_pong(peer.node_id, [], False, [7]), batch,
                       node.own, 1000.0)
    assert core.peers.peers[peer.endpoint].reachable and core.holds.count(peer.endpoint) == 1
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            core.receive_request(b"peer", cw.encode_leaving(peer.node_id), batch, node.own,
                                 1000.1)
        core.receive_reply(peer.endpoint, cw.encode_pong(peer.node_id, [], False, [7]), batch,
                           node.own, 1000.2)
    assert [(entry["event"], entry["endpoint"]) for entry in logs
            if entry["event"].startswith("peer_")] == [("peer_left", peer.endpoint)]
    left = core.peers.peers[peer.endpoint]
    assert not left.up and not left.reachable and core.holds.count(peer.endpoint) == 0
    core.receive_request(b"peer", cw.encode_leaving(other.node_id), batch, node.own, 1000.2)
    assert core.rejected == 1  # a node says only that it leaves itself
    core.receive_request(b"back", cw.encode_ping(peer.node_id, peer.endpoint), batch,
                         node.own, 1000.3)
    assert left.up
    node.store.commit(batch)

    core.take_outgoing()
    core.protocols.heard(peer.endpoint, CLUSTER_PROTOCOL)
    core.protocols.heard(other.endpoint, 3)
    core.leave()
    assert [(item.endpoint, item.frames[0]) for item in core.take_outgoing()] == [
        (peer.endpoint, cw.LEAVING)]
    network.close()
