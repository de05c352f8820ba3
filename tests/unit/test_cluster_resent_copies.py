"""Copies a peer never confirmed are sent to it again when it is back (in process).

The holder list of a copy names every peer it went to; the first live one delivers
it when the origin dies. A peer that was stopped as the copy went must get it once
it is back, or no survivor delivers the message.
"""

from __future__ import annotations

import pytest

from pzq.cluster.unconfirmed import UnconfirmedCopies
from pzq.protocol import cluster as cw
from pzq.protocol.cluster import DefaultReads, GroupReads
from pzq.protocol.message_keys import message_key, parse_message_key
from tests.support.cluster_sim import (
    AFTER_REPLICATION,
    AFTER_TIMEOUT,
    T0,
    SimNetwork,
    SimNode,
)

pytestmark = pytest.mark.timeout(20)


def produce_while_stopped(network: SimNetwork, count: int) -> list[int]:
    """Node 2 stops; node 0 sends each message in its own batch before it notices
    (so node 2 is first in about half the holder lists): every ACK says
    REPLICATION_FAILED, node 1 holds every copy."""
    origin, first, stopped = network.nodes
    stopped.up = False
    seqs = []
    for number in range(count):
        seqs += origin.produce([b"m%d" % number], T0)
        network.step(T0)
    assert origin.core.expire(T0 + AFTER_REPLICATION) and origin.acks == []
    assert first.core.replicas.counts[origin.node_id] == count
    assert stopped.core.replicas.counts[origin.node_id] == 0
    return seqs


def delivered_by_survivors(network: SimNetwork, now: float) -> list[int]:
    origin, *survivors = network.nodes
    delivered = []
    for node in survivors:
        for key in node.deliver(int(now * 1e6)):
            node_id, seq = parse_message_key(key)
            assert node_id == origin.node_id
            delivered.append(seq)
    return delivered


def test_a_copy_a_stopped_peer_never_got_is_sent_when_it_is_back(three):
    origin, first, stopped = three.nodes
    seqs = produce_while_stopped(three, 11)
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)  # node 0 sees node 2 down
    assert not origin.core.peers.peers[stopped.endpoint].reachable
    stopped.up = True  # started again
    now += 0.1
    three.step(now, heartbeat=True)
    assert stopped.core.replicas.counts[origin.node_id] == 11
    assert origin.core.unconfirmed.owed_to(stopped.endpoint) == 0

    origin.up = False  # SIGKILL: the survivors take over
    now += AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    assert sorted(delivered_by_survivors(three, now)) == seqs  # each once, by one


def test_a_message_done_with_is_never_sent_again(three):
    origin, first, stopped = three.nodes
    seqs = produce_while_stopped(three, 3)
    acked = parse_message_key(origin.deliver(int(T0 * 1e6))[0])[1]
    assert origin.ack(message_key(origin.node_id, acked), T0)
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    stopped.up = True
    sent: list[list[bytes]] = []
    due = origin.core.unconfirmed.due

    def recorded(endpoint: str, now: float) -> list[list[bytes]]:
        frames = due(endpoint, now)
        sent.extend(frames)
        return frames

    origin.core.unconfirmed.due = recorded  # type: ignore[method-assign]
    now += 0.1
    three.step(now, heartbeat=True)
    copied = [seq for frames in sent if frames[0] == cw.REPLICATE
              for seq, _ in cw.decode_replicate(frames).messages]
    assert sorted(copied) == [seq for seq in seqs if seq != acked]
    assert stopped.core.replicas.holds(origin.node_id, acked) is False
    assert stopped.core.replicas.counts[origin.node_id] == 2


def test_a_copy_held_whose_confirmation_was_lost_is_held_once(three):
    """Sent again soon once a later batch is confirmed (that one was lost on the way)."""
    origin, first, second = three.nodes
    three.cut.add((second.endpoint, origin.endpoint))  # its answers get lost
    origin.produce([b"a", b"b"], T0)
    three.step(T0)
    assert second.core.replicas.counts[origin.node_id] == 2
    assert origin.core.unconfirmed.owed_to(second.endpoint) == 2
    three.heal()
    origin.produce([b"c"], T0)
    three.step(T0)  # a later batch confirmed
    assert origin.core.unconfirmed.owed_to(second.endpoint) == 2
    now = T0 + origin.core.unconfirmed.resend_s
    three.step(now, heartbeat=True)  # sent again: held already, confirmed
    assert second.core.replicas.counts[origin.node_id] == 3
    assert origin.core.unconfirmed.owed_to(second.endpoint) == 0


def test_a_peer_that_confirmed_nothing_later_is_not_sent_everything_each_time(three):
    """It may only be behind: sent again after the slow interval only."""
    origin, first, second = three.nodes
    three.cut.add((origin.endpoint, second.endpoint))  # the copy is lost
    origin.produce([b"a"], T0)
    three.step(T0)
    three.heal()
    unconfirmed = origin.core.unconfirmed
    assert unconfirmed.resend_s < unconfirmed.slow_resend_s
    three.step(T0 + unconfirmed.resend_s, heartbeat=True)
    assert unconfirmed.owed_to(second.endpoint) == 1
    assert second.core.replicas.counts[origin.node_id] == 0
    three.step(T0 + unconfirmed.slow_resend_s, heartbeat=True)
    assert unconfirmed.owed_to(second.endpoint) == 0
    assert second.core.replicas.counts[origin.node_id] == 1


def test_a_copy_removed_by_a_survivor_is_dropped_when_its_origin_sends_it_again(three):
    """The origin was cut off (alive), a survivor delivered and acked its message and
    removed the copies; the origin, healed, sends again a copy never confirmed."""
    origin, first, second = three.nodes
    three.cut.add((second.endpoint, origin.endpoint))  # second's confirmation is lost
    (seq,) = origin.produce([b"a"], T0)
    three.step(T0)
    three.cut_off(origin)
    now = T0 + AFTER_TIMEOUT
    three.step(now, heartbeat=True)
    taker = next(node for node in (first, second) if node.deliver(int(now * 1e6)))
    assert taker.ack(message_key(origin.node_id, seq), now)
    three.step(now)
    assert not first.core.replicas.holds(origin.node_id, seq)
    assert not second.core.replicas.holds(origin.node_id, seq)
    batch = second.store.begin()  # the copy comes again, as the healed origin sends it
    (frames,) = origin.core.unconfirmed.due(second.endpoint, now + 10)
    second.core.receive_request(origin.endpoint.encode(), frames, batch, second.own, now)
    second.store.commit(batch)
    assert not second.core.replicas.holds(origin.node_id, seq)


def test_past_the_limit_the_oldest_are_given_up():
    kept = UnconfirmedCopies(b"0123abcd", resend_s=1.0, slow_resend_s=1.0, limit_bytes=250)
    for batch_id in range(3):
        kept.sent(cw.encode_replicate, b"\0", [(batch_id, b"x" * 100)], {"peer": batch_id},
                  T0)
    assert kept.owed_to("peer") == 2 and kept.given_up == 1
    assert [cw.decode_replicate(frames).batch_id for frames in kept.due("peer", T0 + 1)] == [
        1, 2]
    kept.forget([1])
    kept.confirmed("peer", 2)
    assert kept.owed_to("peer") == 0 and kept.size == 0 and kept.due("peer", T0 + 5) == []


# -- a named group's DONE that reaches a holder before its copy ---------------------------

GROUPS = DefaultReads("default", groups={"orders": (GroupReads("g1"), GroupReads("g2"))})


def served(node: SimNode, origin: SimNode, group: str, now: float) -> list[int]:
    """What ``node``'s takeover of ``origin`` sends ``group`` of topic orders."""
    state = node.core.takeovers.taken("orders", group).get(origin.node_id)
    if state is None:
        return []
    return [parse_message_key(key)[1] for key in node.deliver(int(now * 1e6), [state])]


def test_a_group_done_before_its_copy_came_is_not_served_again(tmp_path):
    """Node 1 is stopped as node 0's copies go (each in its own batch: node 1 is first
    in some holder lists, node 2 second). Node 0 is cut off, alive; node 2, hearing a
    majority, takes those over, g1 ACKs them, and the DONE reaches node 1 (back) before
    the copies node 0 sends again once it hears node 1. Node 0 dies: node 1, first in
    line, serves g2 those messages, and never g1 again. Five nodes: node 2 takes over
    past node 1 only while it hears a majority without nodes 0 and 1, which three
    nodes cannot give."""
    network = SimNetwork(tmp_path, 5, replicas=2, now=T0)
    try:
        origin, late, taker, *_ = network.nodes
        origin.core.own_reads = lambda: GROUPS
        network.step(T0, heartbeat=True)
        late.up = False
        for number in range(8):
            origin.produce([b"m%d" % number], T0, headers=(b"TOPIC:orders",))
            network.step(T0)
        late_first = (late.node_id, taker.node_id)
        seqs = [seq for seq in range(8)
                if (found := taker.core.replicas.get(origin.node_id, seq)) is not None
                and found[0] == late_first]
        assert seqs  # node 1 first, node 2 holding the copy
        now = T0 + AFTER_TIMEOUT
        network.step(now, heartbeat=True)  # node 1 seen down by all
        network.cut_off(origin)
        now += AFTER_TIMEOUT
        network.step(now, heartbeat=True)  # node 0 seen down by the others
        finished = served(taker, origin, "g1", now)  # its own first ones too
        assert set(seqs) <= set(finished)
        for seq in finished:
            assert taker.ack_group(origin.node_id, seq, "orders", "g1", now)
        network.step(now)
        late.up = True  # back: the DONE comes, node 0 is still cut off from it
        now += 0.1
        network.step(now, heartbeat=True)
        assert taker.core.removes.owed_to(late.endpoint) == 0
        assert not any(late.core.replicas.holds(origin.node_id, seq) for seq in seqs)
        network.cut -= {(origin.endpoint, late.endpoint), (late.endpoint, origin.endpoint)}
        now += 0.1
        network.step(now, heartbeat=True)  # node 0 hears node 1: the copies again
        assert all(late.core.replicas.holds(origin.node_id, seq) for seq in seqs)
        origin.up = False  # SIGKILL
        now += AFTER_TIMEOUT
        network.step(now, heartbeat=True)
        assert served(late, origin, "g1", now) == []  # finished on node 2
        assert served(late, origin, "g2", now) == seqs
    finally:
        network.close()
