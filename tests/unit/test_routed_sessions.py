"""The routing clients' sessions without sockets: route tables as a node's ROUTES
answers them, ACKs and times in; where each message goes, and goes again, out."""

from __future__ import annotations

import json

import pytest

from pzq.client.message import Message
from pzq.client.sessions.producer import ProducerSession
from pzq.client.sessions.routed_group import JOIN_GRACE_S, RoutedGroupSession
from pzq.client.sessions.routed_group import REFRESH_S as GROUP_REFRESH_S
from pzq.client.sessions.routed_producer import (
    LOST_AFTER_RESENDS,
    MOST_MOVES,
    MOVED_REFRESH_S,
    REFRESH_S,
    RoutedProducerSession,
)
from pzq.client.sessions.routes import KnownRoutes
from pzq.errors import ConsumeRefused
from pzq.protocol.frames import ProducerAck
from pzq.protocol.headers import partition_of

pytestmark = pytest.mark.timeout(10)

NODES = ("a", "b", "c")


def node(name: str, state: str = "up") -> dict[str, str]:
    return {"state": state, "receive": f"tcp://{name}:1", "consume": f"tcp://{name}:5",
            "monitor": f"tcp://{name}:3"}


def answer(owners: list[str], down: tuple[str, ...] = (), nodes: tuple[str, ...] = NODES
           ) -> bytes:
    """A node's answer to ROUTES: topic orders with one partition per owner given."""
    return json.dumps({"node": "a", "nodes": {
        f"cluster-{name}": node(name, "down" if name in down else "up") for name in nodes},
        "topics": {"orders": {"partitions": len(owners),
                              "owners": [f"cluster-{owner}" for owner in owners]}}}).encode()


def routes(owners: list[str], now: float = 0.0, **options) -> KnownRoutes:
    known = KnownRoutes("tcp://a:3")
    assert known.answered("tcp://a:3", answer(owners, **options), now) is None
    return known


def receive(name: str) -> str:
    return f"tcp://{name}:1"


def key_of_partition(partition: int, partitions: int) -> bytes:
    return next(b"k%d" % n for n in range(1000) if partition_of(b"k%d" % n, partitions)
                == partition)


# -- the table -------------------------------------------------------------------

def test_an_answer_is_the_table_and_names_the_nodes_to_ask_next():
    known = KnownRoutes(["tcp://x:3", "tcp://a:3"])
    assert known.older_than(5.0, now=5.0)
    assert known.answered("tcp://a:3", answer(["a", "b", "b"], down=("c",)), 7.0) is None
    assert known.monitors == ["tcp://a:3", "tcp://x:3", "tcp://b:3", "tcp://c:3"]
    assert known.fetched == 7.0 and not known.older_than(5.0, now=11.9)
    assert known.partitions("orders") == 3 and known.partitions("other") == 0
    assert known.owners("orders") == ["cluster-a", "cluster-b"]
    assert known.endpoint("cluster-b", "consume") == "tcp://b:5"
    assert known.endpoint("cluster-z", "consume") is None
    assert known.every("receive") == [receive("a"), receive("b"), receive("c")]
    assert known.every("receive", live=True) == [receive("a"), receive("b")]


def test_an_error_answer_leaves_the_table_and_no_answer_waits_a_period():
    known = routes(["a"], now=1.0)
    refusal = known.answered("tcp://a:3", b"ERROR: no cluster", 2.0)
    assert refusal == "ERROR: no cluster" and known.fetched == 1.0
    known.unanswered(3.0)
    assert known.fetched == 3.0 and known.owners("orders") == ["cluster-a"]
    with pytest.raises(ValueError, match="at least one"):
        KnownRoutes([])


# -- the routed producer -----------------------------------------------------------

def test_a_key_goes_to_its_partition_s_owner_and_keyless_messages_spread():
    session = RoutedProducerSession(routes(["a", "b", "c", "a"]), "orders")
    for partition, owner in enumerate(["a", "b", "c", "a"]):
        key = key_of_partition(partition, 4)
        routed = session.send([b"x"], [], 1.0, key=key)
        assert routed.endpoint == receive(owner)
        assert routed.headers == [b"TOPIC:orders", b"KEY:" + key]
    keyless = [session.send([b"x"], [], 1.0).endpoint for _ in range(4)]
    assert keyless == [receive("a"), receive("b"), receive("c"), receive("a")]
    framed = session.send([b"x"], [b"KEY:" + key_of_partition(2, 4)], 1.0, tag="eu")
    assert framed.endpoint == receive("c") and b"TAG:eu" in framed.headers
    assert len(session.sent) == 9


def test_no_node_for_the_topic_is_a_timeout_and_nothing_is_kept():
    known = KnownRoutes("tcp://a:3")
    session = RoutedProducerSession(known, "orders")
    with pytest.raises(TimeoutError, match="names no node with endpoints for topic orders"):
        session.send([b"x"], [], 1.0)
    assert not session.sent


def test_a_message_not_sent_is_not_kept():
    session = RoutedProducerSession(routes(["a"]), "orders")
    routed = session.send([b"x"], [], 1.0)
    session.unsent(routed.msg_id)
    assert not session.sent and session.next_deadline(1.0) is None


def test_acks_are_final_and_a_moved_message_goes_to_the_owner_named():
    session = RoutedProducerSession(routes(["a", "b"]), "orders")
    first = session.send([b"1"], [], 1.0, key=key_of_partition(0, 2))
    second = session.send([b"2"], [], 1.0, key=key_of_partition(0, 2))
    session.answered([ProducerAck(first.msg_id, True, b""),
                      ProducerAck(second.msg_id, False, b"MOVED orders 0 tcp://c:1"),
                      ProducerAck(b"not ours", True, b"")])
    assert [ack.msg_id for ack in session.take_acks()] == [first.msg_id]
    assert session.moved == 1 and session.table_age(1.5) == MOVED_REFRESH_S
    (again,) = session.reroutes(2.0)
    assert (again.msg_id, again.endpoint, again.parts) == (second.msg_id, "tcp://c:1", [b"2"])
    assert session.sent[second.msg_id].moves == 1 and session.table_age(2.0) is None
    assert session.reroutes(2.0) == [] and session.left() == set()


def test_an_unknown_owner_is_looked_up_and_moves_end_after_a_few():
    session = RoutedProducerSession(routes(["a", "b"]), "orders")
    routed = session.send([b"1"], [], 1.0, key=key_of_partition(1, 2))
    for move in range(MOST_MOVES):
        session.answered([ProducerAck(routed.msg_id, False, b"MOVED orders 1 unknown")])
        (routed,) = session.reroutes(2.0)
        assert routed.endpoint == receive("b") and session.moved == move + 1
    refused = ProducerAck(routed.msg_id, False, b"MOVED orders 1 unknown")
    session.answered([refused])
    assert session.take_acks() == [refused] and session.reroutes(3.0) == []


def test_a_silent_node_is_left_once_the_table_counts_it_down():
    known = routes(["a", "b"])
    session = RoutedProducerSession(known, "orders", resend_after=2.0)
    key = key_of_partition(1, 2)
    first = session.send([b"1"], [], 1.0, key=key)
    other = session.send([b"2"], [], 1.0, key=key_of_partition(0, 2))
    assert session.table_age(1.0, sending=True) == REFRESH_S
    assert session.table_age(2.9) is None  # not waited long yet
    assert session.table_age(3.5) == 1.0  # half of resend_after: the node may be gone
    assert session.reroutes(3.5) == []  # the table still counts b up
    known.answered("tcp://a:3", answer(["a", "a"], down=("b",)), 3.6)
    (again,) = session.reroutes(3.6)
    assert (again.msg_id, again.endpoint) == (first.msg_id, receive("a"))
    assert session.resent == 1 and session.left() == {receive("b")}
    assert session.left() == set() and other.msg_id in session.sent
    assert list(session.sent) == [first.msg_id, other.msg_id]  # keys keep their order


def test_a_message_a_node_counted_up_never_answers_goes_again():
    """A shard process killed and started again within a second: the table never
    counts it down, and what was on its way to it when it died is lost."""
    known = routes(["a", "b"])
    session = RoutedProducerSession(known, "orders", resend_after=2.0)
    first = session.send([b"1"], [], 1.0, key=key_of_partition(1, 2))
    later = session.send([b"2"], [], 6.0, key=key_of_partition(1, 2))
    session.carried(first.msg_id)  # later still waits for room: not lost, not resent
    lost_at = 1.0 + 2.0 * LOST_AFTER_RESENDS
    assert session.reroutes(lost_at - 1.0) == []  # a slow node is given its time
    known.answered("tcp://a:3", answer(["a", "b"]), lost_at)  # b still counted up
    (again,) = session.reroutes(lost_at)
    assert (again.msg_id, again.endpoint, again.was) == (first.msg_id, receive("b"),
                                                         receive("b"))
    assert session.resent == 1 and session.left() == set()  # b is not left
    assert session.reroutes(lost_at + 1.0) == []  # not again before its time
    assert session.reroutes(6.0 + 2.0 * LOST_AFTER_RESENDS) == []
    session.carried(later.msg_id)
    assert [r.msg_id for r in session.reroutes(7.0 + 2.0 * LOST_AFTER_RESENDS)] == [
        later.msg_id]


def test_a_forgotten_message_frees_its_room_and_its_late_ack_is_ignored():
    session = ProducerSession(window=2, batch=1)
    session.protocol = 2
    first, second = session.next_msg_id(), session.next_msg_id()
    assert session.add(first, [b"1"], [], 1.0) is not None
    session.add(second, [b"2"], [], 1.0)
    assert session.full
    session.forget(first)
    assert not session.full and list(session.unanswered) == [second]


def test_a_message_waits_while_its_partition_has_no_live_owner():
    known = routes(["a", "b"])
    session = RoutedProducerSession(known, "orders")
    session.send([b"1"], [], 1.0, key=key_of_partition(1, 2))
    known.answered("tcp://a:3", answer(["a", "b"], down=("b",)), 4.0)  # b down, still owner
    assert session.reroutes(4.0) == [] and session.left() == set()


def test_the_producer_looks_again_while_messages_are_out():
    session = RoutedProducerSession(routes(["a"]), "orders", resend_after=2.0)
    assert session.next_deadline(1.0) is None
    session.send([b"1"], [], 1.0)
    assert session.next_deadline(1.0) == 1.5


# -- the routed group consumer -----------------------------------------------------

def test_every_node_with_a_consume_endpoint_is_joined_once():
    known = routes(["a", "b"], nodes=("a", "b"))
    session: RoutedGroupSession[str] = RoutedGroupSession(known)
    assert session.to_join() == ["tcp://a:5", "tcp://b:5"]
    session.joined("tcp://a:5", "member a", 0.0)
    assert session.to_join() == ["tcp://b:5"]  # b was down: tried again
    assert session.table_age(1.0) is None and session.next_deadline(1.0) == GROUP_REFRESH_S
    assert session.table_age(GROUP_REFRESH_S) == GROUP_REFRESH_S
    known.answered("tcp://a:3", answer(["a"], nodes=("a", "b", "c")), 3.0)
    session.joined("tcp://b:5", "member b", 0.0)
    assert session.to_join() == ["tcp://c:5"]


def test_a_node_the_table_counts_down_is_not_joined_until_it_is_up():
    known = routes(["a", "b"], down=("b",), nodes=("a", "b"))
    session: RoutedGroupSession[str] = RoutedGroupSession(known)
    assert session.to_join() == ["tcp://a:5"]  # a try at b would wait its timeout out
    session.joined("tcp://a:5", "member a", 0.0)
    known.answered("tcp://a:3", answer(["a", "b"], nodes=("a", "b")), 3.0)  # b is back
    assert session.to_join() == ["tcp://b:5"]


def test_joins_are_awaited_together_and_one_unanswered_is_tried_again():
    """Every node's join goes at once: one not answered is no node to join again, nor
    to wait for after the join timeout; given up, it is tried again."""
    # the table taken at 12: asked again at 14, after c's join is given up (13)
    session: RoutedGroupSession[str] = RoutedGroupSession(routes(["a"], now=12.0),
                                                          join_timeout=3.0)
    for name in NODES:
        session.join_sent(f"tcp://{name}:5", f"member {name}", 10.0)
    assert session.to_join() == []
    assert session.first_joins_wake() == 13.0  # none joined: the first to give up
    session.joined("tcp://a:5", "member a", 10.2)
    assert session.awaited() == [("tcp://b:5", "member b"), ("tcp://c:5", "member c")]
    assert session.first_joins_wake() == 10.2 + JOIN_GRACE_S  # the others' grace
    assert not session.first_joins_done(10.2 + JOIN_GRACE_S / 2)
    assert session.first_joins_done(10.2 + JOIN_GRACE_S)  # a, and no longer b and c
    session.join_sent("tcp://b:5", "member b", 11.0)  # (b again, later)
    assert session.next_deadline(11.0) == 13.0  # c's join given up then
    assert session.given_up(12.9) == []
    assert session.given_up(13.0) == ["member c"]
    assert session.to_join() == ["tcp://c:5"]
    assert session.every_member() == ["member a", "member b"]
    session.joined("tcp://b:5", "member b", 13.5)
    assert session.first_joined == 10.2 and session.awaited() == []
    assert session.first_joins_done(10.2)  # none awaited


def test_without_a_join_timeout_a_join_is_awaited_for_ever():
    session: RoutedGroupSession[str] = RoutedGroupSession(routes(["a"]), join_timeout=None)
    session.join_sent("tcp://a:5", "member a", 0.0)
    assert session.given_up(1e9) == [] and session.first_joins_wake() is None
    assert session.next_deadline(0.0) == GROUP_REFRESH_S


def test_no_member_after_the_joins_is_said_and_a_refusal_is_said_again():
    session: RoutedGroupSession[str] = RoutedGroupSession(routes(["a"]))
    with pytest.raises(ValueError, match=r"^no node in the route table has a consume "
                                         r"endpoint \(--consume-dsn\)$"):
        session.check_joined()
    session.joined("tcp://a:5", "member a", 0.0)
    session.check_joined()
    session.refuse_again()  # none refused yet
    session.refused(ConsumeRefused("FORBIDDEN consume orders:g: the rules changed"))
    for _ in range(2):
        with pytest.raises(ConsumeRefused, match="^FORBIDDEN consume orders:g: the rules"):
            session.refuse_again()


def test_members_are_read_in_turn():
    session: RoutedGroupSession[str] = RoutedGroupSession(routes(["a"]))
    for name in NODES:
        session.joined(f"tcp://{name}:5", name, 0.0)
    assert [session.in_turn() for _ in range(4)] == [
        ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"], ["b", "c", "a"]]


class Member:
    """A member's messages point back at it; it answers nothing itself here."""

    def ack(self, message: Message) -> None:
        raise AssertionError("answered through the session's groups only")

    nack = ack


def test_acks_go_back_to_the_member_each_delivery_came_from():
    session: RoutedGroupSession[Member] = RoutedGroupSession(routes(["a"]))
    first, second = Member(), Member()
    session.joined("tcp://a:5", first, 0.0)
    session.joined("tcp://b:5", second, 0.0)
    messages = [Message(b"k%d" % n, (b"x",), {}, 0, 0, b"", member)
                for n, member in enumerate([first, second, first])]
    groups = session.by_member(messages)
    assert [(member, [m.key for m in group]) for member, group in groups] == [
        (first, [b"k0", b"k2"]), (second, [b"k1"])]
    with pytest.raises(ValueError, match="received by another consumer"):  # no member's
        session.by_member([Message(b"k", (), {}, 0, 0, b"", Member())])


def test_settle_joins_makes_the_answered_members_and_gives_up_the_late():
    session: RoutedGroupSession[str] = RoutedGroupSession(routes(["a"]), join_timeout=3.0)
    for name, sent in (("a", 0.0), ("b", 0.0), ("c", 1.0)):
        session.join_sent(f"tcp://{name}:5", name, sent)
    assert session.settle_joins(lambda member: member == "a", 3.5) == ["b"]
    assert list(session.members.values()) == ["a"]
    assert session.awaited() == [("tcp://c:5", "c")]


def test_a_joins_probe_wakes_the_routed_consumer_before_its_timeout():
    """The wait for the first joins (and between receives) ends in time for a join's
    probe of its endpoint: at a node's --send-dsn no answer would wake it before the
    join timeout."""
    session: RoutedGroupSession[str] = RoutedGroupSession(routes(["a"]), join_timeout=30.0)
    session.join_sent("tcp://a:5", "member a", 0.0)
    session.join_sent("tcp://b:5", "member b", 0.0)
    check_at = {"member a": 1.0, "member b": None}.get  # b asked already
    assert session.first_joins_wake() == 30.0
    assert session.with_router_checks(session.first_joins_wake(), check_at) == 1.0
    assert session.with_router_checks(None, check_at) == 1.0
    assert session.with_router_checks(0.5, check_at) == 0.5
    assert session.with_router_checks(None, lambda member: None) is None
