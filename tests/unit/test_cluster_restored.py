"""A node restored from a backup names the seqs it lost (RESTORED): the first live holder
of each copy among them delivers it while the origin is up, and only those; a peer of
an older protocol is not sent the frame."""

from __future__ import annotations

import json

import pytest
import structlog

from pzq.backup.manifest import RESTORE_SEQ_GAP, RESTORED, lost_seqs, restore_skip, restored
from pzq.errors import DecodeError, StoreError
from pzq.protocol import cluster as cw
from pzq.protocol.message_keys import message_key, parse_message_key
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


def restarted_as_restored(network: SimNetwork, node: SimNode, lost: list[list[int]]
                          ) -> SimNode:
    """The node started again with what a restore keeps beside its store."""
    (node.store.path / RESTORED).write_text(json.dumps({"lost_seqs": lost}))
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
