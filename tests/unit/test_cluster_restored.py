"""A node restored from a backup names the seqs it lost (RESTORED): the first live holder
of each copy among them delivers it while the origin is up, and only those; a peer of
an older protocol is not sent the frame. A peer keeps the ranges on disk while it holds
a copy in them and confirms them (RESTORED_KEPT): the restored node tells it no more."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import structlog

from pzq.backup.manifest import RESTORE_SEQ_GAP, RESTORED, lost_seqs, restore_skip, restored
from pzq.cluster.kept_lost import KeptLost
from pzq.errors import DecodeError, StoreError
from pzq.protocol import cluster as cw
from pzq.protocol.message_keys import message_key, parse_message_key
from pzq.store import keyspace
from pzq.store.store import Store
from tests.support.cluster_sim import T0, SimNetwork, SimNode

pytestmark = pytest.mark.timeout(10)
NODE = b"0a1b2c3d"


def test_restored_frame_round_trip_and_refusals():
    ranges = [(5, 10), (2**48, 2**49)]
    assert cw.decode_restored(cw.encode_restored(NODE, ranges)) == (NODE, ranges)
    assert cw.decode_restored(cw.encode_restored(NODE, [])) == (NODE, [])
    for bad in ([cw.RESTORED, NODE], [cw.RESTORED, NODE, b"\x00" * 15],
                cw.encode_restored(NODE, [(10, 5)]), cw.encode_restored(NODE, [(5, 5)])):
        with pytest.raises(DecodeError):
            cw.decode_restored(bad)
    assert cw.decode_restored_kept(cw.encode_restored_kept(ranges)) == ranges
    for bad in ([cw.RESTORED_KEPT], [cw.RESTORED_KEPT, b"\x00" * 17],
                cw.encode_restored_kept([(7, 3)]), [*cw.encode_restored_kept(ranges), b""]):
        with pytest.raises(DecodeError):
            cw.decode_restored_kept(bad)


def restarted_as_restored(network: SimNetwork, node: SimNode, lost: list[list[int]]
                          ) -> SimNode:
    """The node started again with what a restore keeps beside its store."""
    (node.store.path / RESTORED).write_text(json.dumps({"lost_seqs": lost}))
    return restarted(network, node)


def restarted(network: SimNetwork, node: SimNode) -> SimNode:
    """The node started again on its store (what it kept in memory forgotten)."""
    node.close()
    index = network.nodes.index(node)
    again = SimNode(network.directory, node.endpoint,
                    tuple(n.endpoint for n in network.nodes if n is not node), 2, T0)
    network.nodes[index] = network.by_endpoint[node.endpoint] = again
    return again


def test_the_first_live_holder_delivers_what_the_restore_lost_and_nothing_else(tmp_path):
    network = SimNetwork(tmp_path, 3, replicas=2, now=T0)
    network.step(T0, heartbeat=True)
    origin, first, second = network.nodes
    seqs = origin.produce([b"a", b"b", b"c", b"d", b"e", b"f"], T0)
    network.step(T0)
    lost = seqs[3:]
    origin = restarted_as_restored(network, origin, [[lost[0], lost[-1] + 1]])
    now = T0 + 0.1
    for _ in range(3):  # its ROUTING, then RESTORED, then the holders' look at it
        now += 0.1
        network.step(now, heartbeat=True)
    delivered = {holder.endpoint: [parse_message_key(key)[1]
                                   for key in holder.deliver(int(now * 1e6))]
                 for holder in (first, second)}
    assert sorted(delivered[first.endpoint] + delivered[second.endpoint]) == lost
    for holder in (first, second):  # the first in each copy's holder list, alone
        for seq in delivered[holder.endpoint]:
            holders, _ = holder.core.replicas.get(origin.node_id, seq)
            assert holders[0] == holder.node_id
        figures = holder.core.takeovers.figures(0)[origin.node_id.decode()]
        assert figures["lost_in_restore"] and not figures["paused"]
    for holder in (first, second):
        for seq in delivered[holder.endpoint]:
            assert holder.ack(message_key(origin.node_id, seq), now)
    network.step(now)
    for _ in range(2):  # paused once none is held, then gone
        now += 0.1
        network.step(now, heartbeat=True)
    for holder in (first, second):
        assert holder.core.replicas.counts[origin.node_id] == len(seqs) - len(lost)
        assert not holder.core.takeovers.states
        assert holder.deliver(int(now * 1e6)) == []  # the rest is the origin's
    network.close()


def test_a_peer_of_an_older_protocol_is_not_sent_restored_and_said_once(tmp_path):
    network = SimNetwork(tmp_path, 3, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    origin = restarted_as_restored(network, network.nodes[0], [[7, 9]])
    network.step(T0 + 0.1, heartbeat=True)
    _, newer, older = network.nodes
    origin.core.protocols.heard(older.endpoint, 4)
    with structlog.testing.capture_logs() as logs:
        for tick in (0.2, 0.3):
            origin.core.take_outgoing()
            origin.core.heartbeat(T0 + tick, origin.own)
            sent = [item.endpoint for item in origin.core.take_outgoing()
                    if item.frames[0] == cw.RESTORED]
            assert sent == [newer.endpoint]
    untold = [entry for entry in logs if entry["event"] == "restored_seqs_untold"]
    assert [(entry["peer"], entry["peer_protocol"], entry["lost_seqs"])
            for entry in untold] == [(older.endpoint, 4, [(7, 9)])]
    network.close()


def test_what_a_restore_lost_is_kept_beside_the_store_after_any_earlier_one(tmp_path):
    database = tmp_path / "store"
    database.mkdir()
    (database / "backup-manifest.json").write_text("{}")
    assert restored(database, {"complete": True, "lost_seqs": [[5, 10]]},
                    (20, 20 + RESTORE_SEQ_GAP)) == [(5, 10), (20, 20 + RESTORE_SEQ_GAP)]
    assert not (database / "backup-manifest.json").exists()
    assert lost_seqs(database) == [(5, 10), (20, 20 + RESTORE_SEQ_GAP)]
    assert lost_seqs(tmp_path) == []  # never restored
    (database / RESTORED).write_text('{"complete": true}')  # by a release before them
    assert lost_seqs(database) == []
    for bad, why in (("{", "is unreadable"), ('{"lost_seqs": [[1]]}', "is not a list")):
        (database / RESTORED).write_text(bad)
        with pytest.raises(StoreError, match=why):
            lost_seqs(database)


def test_a_later_restore_of_the_same_copy_skips_past_what_an_earlier_one_gave_out():
    """The skip grows a seq per µs since the snapshot: a second restore of one copy
    starts after the first's seqs, and its lost range covers them."""
    copy_end, taken_us = 1_000, 5_000_000
    backup = {"taken_at_us": taken_us}
    first = copy_end + restore_skip(backup, taken_us + 2_000_000)
    given_out_by_first = range(first, first + 300_000)  # 0.3 s at a million a second
    second = copy_end + restore_skip(backup, taken_us + 3_000_000)
    assert given_out_by_first[-1] < second  # its lost range [copy_end, second) covers them
    assert first - copy_end == RESTORE_SEQ_GAP + 2_000_000
    # A clock behind the snapshot, or a manifest without its time: the gap alone
    assert restore_skip(backup, taken_us - 1) == RESTORE_SEQ_GAP
    assert restore_skip({}, taken_us) == RESTORE_SEQ_GAP


def restored_sent(node: SimNode) -> list[str]:
    return [item.endpoint for item in node.core.outgoing if item.frames[0] == cw.RESTORED]


def heartbeats(network: SimNetwork, now: float, count: int) -> float:
    for _ in range(count):
        now += 0.1
        network.step(now, heartbeat=True)
    return now


def test_each_peer_keeps_the_lost_seqs_through_a_restart_and_is_told_them_no_more(tmp_path):
    network = SimNetwork(tmp_path, 3, replicas=2, now=T0)
    network.step(T0, heartbeat=True)
    seqs = network.nodes[0].produce([b"a", b"b", b"c", b"d"], T0)
    network.step(T0)
    lost = [(seqs[2], seqs[-1] + 1)]
    origin = restarted_as_restored(network, network.nodes[0], [list(lost[0])])
    now = heartbeats(network, T0, 3)  # its ROUTING, then RESTORED, answered
    _, first, second = network.nodes
    assert origin.core.restored.confirmed == {first.endpoint, second.endpoint}
    sent = dict(origin.core.restored.sent)
    assert sent == {first.endpoint: 1, second.endpoint: 1}
    for _ in range(3):  # told no more
        origin.core.heartbeat(now, origin.own)
        assert restored_sent(origin) == []
        network.step(now)
    assert dict(origin.core.restored.sent) == sent
    peers = {peer["endpoint"]: peer for peer in origin.core.snapshot(now)["peers"]}
    assert all(peers[peer.endpoint]["restored_confirmed"] for peer in (first, second))
    # Both peers restarted: what they kept comes back from their stores, untold
    first, second = restarted(network, first), restarted(network, second)
    for holder in (first, second):
        assert holder.core.takeovers.lost == {origin.node_id: lost}
        assert holder.core.snapshot(now)["restored_seqs_kept"] == {
            origin.node_id.decode(): [list(lost[0])]}
    now = heartbeats(network, now, 3)
    assert not restored_sent(origin) and dict(origin.core.restored.sent) == sent
    delivered = [parse_message_key(key)[1] for holder in (first, second)
                 for key in holder.deliver(int(now * 1e6))]
    assert sorted(delivered) == seqs[2:]
    for holder in (first, second):
        assert sum(holder.core.frames.restored_received.values()) == 0
    network.close()


def test_a_peer_drops_the_ranges_once_it_holds_no_copy_in_them_across_a_restart(tmp_path):
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    seqs = network.nodes[0].produce([b"a", b"b", b"c"], T0)
    network.step(T0)
    origin = restarted_as_restored(network, network.nodes[0], [[seqs[1], seqs[-1] + 1]])
    now = heartbeats(network, T0, 3)
    holder = network.nodes[1]
    assert holder.core.takeovers.lost == {origin.node_id: [(seqs[1], seqs[-1] + 1)]}
    with structlog.testing.capture_logs() as logs:
        for key in holder.deliver(int(now * 1e6)):
            assert holder.ack(key, now)
        network.step(now)
        now = heartbeats(network, now, 1)
    dropped = [entry for entry in logs if entry["event"] == "restored_seqs_dropped"]
    assert [(entry["origin"], entry["lost_seqs"]) for entry in dropped] == [
        (origin.node_id.decode(), [(seqs[1], seqs[-1] + 1)])]
    assert holder.core.takeovers.lost == {}
    now = heartbeats(network, now, 1)  # (the delete goes with the next batch)
    holder = restarted(network, holder)
    assert holder.core.takeovers.lost == {}
    assert list(holder.store.iterate(keyspace.LOST_PREFIX)) == []
    # The origin restarted tells it again: confirmed at once, nothing kept
    origin = restarted(network, origin)
    with structlog.testing.capture_logs() as logs:
        heartbeats(network, now, 3)
    assert origin.core.restored.confirmed == {holder.endpoint}
    assert holder.core.takeovers.lost == {}
    assert not [entry for entry in logs if entry["event"] == "restored_seqs_dropped"]
    network.close()


def test_a_peer_of_protocol_5_keeps_being_told_and_a_restored_node_of_5_gets_no_answer(
        tmp_path):
    """An origin of protocol 5 would refuse RESTORED_KEPT: a peer does not answer it, and
    the origin tells every peer that has not confirmed with each heartbeat."""
    network = SimNetwork(tmp_path, 2, replicas=1, now=T0)
    network.step(T0, heartbeat=True)
    seqs = network.nodes[0].produce([b"a"], T0)
    network.step(T0)
    origin = restarted_as_restored(network, network.nodes[0], [[seqs[0], seqs[0] + 1]])
    holder = network.nodes[1]
    told = []
    for tick in range(6):
        now = T0 + 0.1 * (tick + 1)
        holder.core.heartbeat(now, holder.own)
        origin.core.heartbeat(now, origin.own)
        # Its ROUTING says protocol 5, as a node of the previous release's does
        for item in origin.core.outgoing:
            if item.frames[0] == cw.ROUTING:
                item.frames[:] = cw.encode_routing(origin.node_id, replace(
                    cw.decode_routing_frame(item.frames)[1], protocol=5))
        told.append(restored_sent(origin))
        network.step(now)
    assert told[3:] == [[holder.endpoint]] * 3  # with every heartbeat
    assert origin.core.restored.confirmed == set()
    sent = origin.core.restored.sent[holder.endpoint]
    assert sent >= 3 and holder.core.frames.restored_received[origin.endpoint] == sent
    assert origin.core.rejected == 0
    assert holder.core.takeovers.lost == {origin.node_id: [(seqs[0], seqs[0] + 1)]}
    network.close()


def test_kept_lost_seqs_follow_the_batches_a_failed_one_kept_nowhere(tmp_path):
    """Kept in memory only as the store has them: a keep in a failed batch is gone
    (the origin, unconfirmed, tells again); a drop in a failed batch is deleted with
    the next one."""
    origin, ranges = b"0a1b2c3d", [(5, 9)]
    store = Store.open(tmp_path / "store")
    kept = KeptLost(store)
    batch = store.begin()
    kept.prepare(batch)
    kept.keep(batch, origin, ranges)
    kept.failed()  # as if store.commit(batch) had raised StoreError
    assert kept.ranges == {}
    batch = store.begin()
    kept.prepare(batch)
    kept.keep(batch, origin, ranges)
    store.commit(batch)
    kept.written()
    assert KeptLost(store).ranges == {origin: ranges}
    kept.drop(origin, "none held")
    batch = store.begin()
    kept.prepare(batch)
    kept.failed()
    assert KeptLost(store).ranges == {origin: ranges}  # the delete not written
    batch = store.begin()
    kept.prepare(batch)
    store.commit(batch)
    kept.written()
    assert kept.ranges == KeptLost(store).ranges == {}
    store.close()
