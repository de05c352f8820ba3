"""A group consumer's session without a socket: the node's frames (made by the node's
own encoders) and times in, frames to send and deliveries out."""

from __future__ import annotations

import copy

import pytest

from pzq.client.message import Message
from pzq.client.sessions.consumer import ConsumerSession
from pzq.client.sessions.delivered import keys_of, own_key, own_keys
from pzq.client.sessions.group import ROUTER_CHECK_AFTER_S, GroupSession
from pzq.errors import ConsumeRefused
from pzq.protocol import consume as wire
from pzq.protocol import frames as original
from pzq.protocol.frame_groups import group_chunks

pytestmark = pytest.mark.timeout(10)

OWNER = object()  # the shell a session's messages answer through
SUBSCRIBE = wire.Subscribe("orders", "g", 10, protocol=wire.LATEST_PROTOCOL)


def node_says(frames: list[bytes]) -> list[bytes]:
    """A frame the node's ROUTER sends, as the consumer's DEALER receives it."""
    return frames[1:]


def consuming(heartbeat_ms: int = 2000, protocol: int = 2) -> list[bytes]:
    return node_says(wire.encode_consuming(b"rid", wire.Subscribe(
        "orders", "g", 10, protocol=protocol), heartbeat_ms))


def error(text: str) -> list[bytes]:
    return node_says(wire.encode_error(b"rid", text))


def batch(*entries: tuple[bytes, tuple[bytes, ...], tuple[bytes, ...]],
          sent_us: int = 5, ack_timeout_us: int = 7) -> list[bytes]:
    head = wire.deliver_head(b"rid", b"orders", b"g", protocol=2)
    body = b"".join(wire.batch_entry(key, b"".join(group_chunks(headers)),
                                     b"".join(group_chunks(parts)))
                    for key, headers, parts in entries)
    return node_says([*head, b"%d" % sent_us, b"%d" % ack_timeout_us, body])


def deliver(key: bytes, *parts: bytes, headers: tuple[bytes, ...] = ()) -> list[bytes]:
    head = wire.deliver_head(b"rid", b"orders", b"g")
    return node_says([*head, *original.encode_delivery(key, 5, 7, parts, headers)])


def joined(subscribe: wire.Subscribe = SUBSCRIBE, protocol: int = 2,
           heartbeat_ms: int = 2000) -> GroupSession[Message]:
    session = GroupSession(subscribe, Message, OWNER, now=0.0)
    assert session.consume(0.0) == wire.encode_consume(subscribe)
    assert session.received(consuming(heartbeat_ms, protocol), 0.5) == ()
    assert session.joined
    return session


def request(frames: list[bytes]) -> wire.Request:
    """What the node reads of a frame the session sends."""
    return wire.decode_request(frames)


# -- joining ---------------------------------------------------------------------

def test_consuming_joins_with_the_node_s_heartbeat_and_protocol():
    session = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    consume = request(session.consume(0.0))
    assert consume.subscribe == SUBSCRIBE and b"PROTOCOL:2" in session.consume(0.0)
    assert not session.joined
    session.received(consuming(heartbeat_ms=2500, protocol=2), 0.1)
    assert (session.joined, session.heartbeat_s, session.protocol) == (True, 2.5, 2)


def test_a_node_from_before_protocol_2_is_asked_again_without_it():
    session = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    again = session.received(error("CONSUME option b'PROTOCOL:2' is not FILTER:value, ..."),
                             0.1)
    assert len(again) == 1 and not any(frame.startswith(wire.PROTOCOL) for frame in again[0])
    assert session.subscribe.protocol == 1 and not session.joined and not session.errors
    session.received(consuming(protocol=1)[:5], 0.2)  # its CONSUMING has 5 frames
    assert session.joined and session.protocol == 1
    session.received(deliver(b"k1", b"body"), 0.3)
    (message,) = session.take(5)
    assert message.parts == (b"body",)
    assert session.ack([message.key], 0.4) == [[wire.ACK, b"k1"]]  # one key a frame


def test_a_refused_group_raises_with_the_node_s_words():
    session = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    with pytest.raises(ConsumeRefused, match="no topic 'orders'"):
        session.received(error("CONSUME: no topic 'orders' (DECLARE TOPIC orders ...)"), 0.1)
    one = GroupSession(wire.Subscribe("orders", "g", 10), Message, OWNER, now=0.0)
    with pytest.raises(ConsumeRefused):  # protocol 1 asked: nothing to downgrade
        one.received(error("CONSUME option b'PROTOCOL:2' is not ..."), 0.1)


@pytest.mark.parametrize("garbage", [
    [b""], [b"NONSENSE", b"x"], [wire.CONSUMING, b"t"], [wire.ERROR],
    [wire.ERROR, b"a", b"b"], [wire.REFUSED, wire.NACK, b"k"], [wire.ACKED],
    [wire.DELIVER, b"t", b"g", b"k", b"5", b"7", b"", b"x"][:7],
    [wire.DELIVER, b"t", b"g", b"k", b"x", b"7", b"", b"body"],
    [wire.BATCH, b"t", b"g", b"5", b"7"],
    [wire.BATCH, b"t", b"g", b"5", b"7", b"\x05k"],
    [wire.CONSUMING, b"t", b"g", b"10", b"1000", b"PROTOCOL:x"],
])
def test_garbage_is_counted_and_changes_nothing(garbage):
    waiting = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    assert waiting.received(garbage, 0.1) == () and not waiting.joined
    session = joined()
    assert session.received(garbage, 1.0) == ()
    assert (waiting.malformed, session.malformed) == (1, 1)
    assert not session.arrived and not session.errors and session.protocol == 2


def test_no_frames_at_all_is_garbage_too():
    session = joined()
    assert session.received([], 1.0) == () and session.malformed == 1


def test_a_heartbeat_while_joining_is_not_an_answer():
    session = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    assert session.received([wire.HEARTBEAT], 0.1) == () and not session.joined


# -- deliveries ------------------------------------------------------------------

def test_a_batch_is_decoded_at_once_and_taken_in_turn():
    session = joined()
    session.received(batch((b"k1", (b"DELIVERY:2", b"TOPIC:orders"), (b"a", b"")),
                           (b"k2", (), (b"b" * 300,)), (b"k3", (), (b"c",)),
                           sent_us=100, ack_timeout_us=30), 1.0)
    first, second = session.take(2)
    assert (first.key, first.parts, first.headers, first.deliveries) == (
        b"k1", (b"a", b""), {"DELIVERY": "2", "TOPIC": "orders"}, 2)
    assert (second.headers, second.deliveries, second.deadline_us) == ({}, None, 130)
    assert first._consumer is OWNER and first.peer == b""
    assert [message.key for message in session.take(5)] == [b"k3"] and session.take(1) == []


def test_one_deliver_a_message_in_protocol_1():
    session = joined(protocol=1)
    session.received(deliver(b"k1", b"a", b"b", headers=(b"DELIVERY:3",)), 1.0)
    session.received(deliver(b"k2", b"c"), 1.0)
    first, second = session.take(2)
    assert (first.key, first.parts, first.deliveries) == (b"k1", (b"a", b"b"), 3)
    assert (second.key, second.headers, second.sent_us, second.ack_timeout_us) == (
        b"k2", {}, 5, 7)


def test_deliveries_wait_beside_whatever_else_the_node_says():
    session = joined(wire.Subscribe("orders", "g", 10, confirm=True, protocol=2))
    session.received(batch((b"k1", (), (b"a",))), 1.0)
    session.confirm([b"k1"], 1.1)
    session.received(node_says([b"rid", wire.ACKED, b"k1"]), 1.2)
    session.received(batch((b"k2", (), (b"b",))), 1.3)
    assert [message.key for message in session.take(5)] == [b"k1", b"k2"]


# -- answers ---------------------------------------------------------------------

def test_keys_go_in_one_frame_in_protocol_2_and_one_each_in_protocol_1():
    two, one = joined(), joined(protocol=1)
    assert two.ack([b"a", b"b"], 1.0) == [[wire.ACK, b"a b"]]
    assert one.ack([b"a", b"b"], 1.0) == [[wire.ACK, b"a", b"b"]]
    assert request(two.nack([b"a", b"b"], 1.0)[0]).keys == (b"a", b"b")
    assert two.ack([], 1.0) == ()  # nothing to say: nothing sent


def test_more_keys_than_one_message_holds_go_in_several():
    session = joined()
    keys = [b"k%d" % n for n in range(wire.MAX_KEYS * 2 + 1)]
    out = session.ack(keys, 1.0)
    assert [len(request(frames).keys) for frames in out] == [wire.MAX_KEYS, wire.MAX_KEYS, 1]
    assert [key for frames in out for key in request(frames).keys] == keys


def test_nack_with_a_delay_working_reject_and_bye():
    session = joined()
    (delayed,) = session.nack([b"k"], 1.0, delay=1.5)
    assert (request(delayed).verb, request(delayed).delay_ms) == (wire.NACK, 1500)
    assert request(session.nack([b"k"], 1.0)[0]).delay_ms == 0
    assert request(session.working([b"k"], 1.0)[0]).verb == wire.WORKING
    assert request(session.reject([b"k", b"l"], 1.0)[0]).keys == (b"k", b"l")
    assert request(session.bye()).verb == wire.BYE


def test_confirmations_are_awaited_key_by_key():
    session = joined(wire.Subscribe("orders", "g", 10, confirm=True, protocol=2))
    assert session.confirm([b"a", b"b"], 1.0) == [[wire.ACK, b"a b"]]
    assert session.unconfirmed([b"a", b"b"]) == 2
    session.received(node_says([b"rid", wire.ACKED, b"a"]), 1.1)
    assert session.unconfirmed([b"a", b"b"]) == 1
    session.forget_unconfirmed([b"b"])
    assert session.unconfirmed([b"a", b"b"]) == 0
    with pytest.raises(ValueError, match="confirm=True"):
        joined().confirm([b"a"], 1.0)


# -- joining again -----------------------------------------------------------------

def test_a_node_that_does_not_know_the_connection_is_joined_again_once():
    session = joined()
    lost = "HEARTBEAT before CONSUME: send CONSUME first"
    (again,) = session.received(error(lost), 5.0)
    assert request(again).subscribe == SUBSCRIBE
    assert session.received(error(lost), 5.1) == ()  # a CONSUME is on its way already
    assert session.errors == [lost, lost]
    session.received(consuming(), 5.2)
    (later,) = session.received(error(lost), 9.0)  # joined: it may be lost again
    assert request(later).verb == wire.CONSUME


def test_a_consume_sent_again_and_lost_is_sent_once_more():
    """The node killed again before it answered the CONSUME sent again: the node that
    follows says, at each HEARTBEAT, that it does not know the connection, and once
    two of its heartbeat periods passed the CONSUME goes again (before, never: the
    consumer waited for ever)."""
    session = joined(heartbeat_ms=1000)
    lost = "HEARTBEAT before CONSUME: send CONSUME first"
    (again,) = session.received(error(lost), 5.0)
    assert request(again).verb == wire.CONSUME
    assert session.received(error(lost), 6.0) == ()  # (its answer may still come)
    (once_more,) = session.received(error(lost), 7.0)
    assert request(once_more).verb == wire.CONSUME
    assert session.received(error(lost), 7.5) == ()


def test_refused_acks_go_with_the_consume_and_after_it():
    session = joined()
    assert session.received(error("ACK before CONSUME: send CONSUME first"), 5.0) == ()
    k1, k2 = b"0000abcd-0000000000000001", b"0000abcd-0000000000000002"
    refused = wire.encode_refused(b"rid", [k1, b"not-a-key", k2])
    (again,) = session.received(node_says(refused), 5.0)
    subscribe = request(again).subscribe
    # a key the node could not read is not sent again: the CONSUME would be refused
    assert subscribe is not None and subscribe.acked == (k1, k2)
    assert session.subscribe.acked == ()  # the next CONSUME carries no old ACKs
    after = session.received(node_says(wire.encode_refused(b"rid", [b"k3"])), 5.1)
    assert after == [[wire.ACK, b"k3"]]  # the CONSUME is on its way: ACKs follow it


def test_another_error_is_kept_and_ends_a_rejoin():
    session = joined()
    session.received(error("HEARTBEAT before CONSUME: send CONSUME first"), 5.0)
    session.received(error("CONSUME: no topic 'orders'"), 5.1)  # the CONSUME was refused
    (again,) = session.received(error("HEARTBEAT before CONSUME: send CONSUME first"), 6.0)
    assert request(again).verb == wire.CONSUME
    assert session.errors[1] == "CONSUME: no topic 'orders'"
    unknown = "ACK of unknown key b'x'"
    assert session.received(error(unknown), 6.1) == () and session.errors[-1] == unknown



def test_deliveries_from_before_the_node_forgot_the_connection_are_not_nacked():
    """A key names a message: a NACK of what came before the node said it does not
    know the connection (it restarted) would give back its delivery of the same
    message made since (the time soak's "again" breach). Such a NACK sends nothing;
    an ACK of it goes (the message is done with), as a NACK of one since does."""
    session = joined()
    session.received(batch((b"k1", (), (b"a",)), (b"k2", (), (b"b",)), sent_us=100), 1.0)
    session.received(deliver(b"k3", b"c"), 1.1)  # (protocol 1's sent_us: 5)
    before = session.take(3)
    assert session.forgot_upto_us == 0
    assert own_keys(before, OWNER, session.forgot_upto_us) == [b"k1", b"k2", b"k3"]
    (again,) = session.received(error("HEARTBEAT before CONSUME: send CONSUME first"), 5.0)
    assert request(again).verb == wire.CONSUME and session.forgot_upto_us == 100
    session.received(consuming(), 5.1)
    session.received(batch((b"k1", (), (b"a",)), sent_us=101), 5.2)
    (since,) = session.take(1)
    assert own_keys(before, OWNER, session.forgot_upto_us) == []
    assert own_key(before[0], OWNER, session.forgot_upto_us) == []
    assert session.nack(own_key(before[0], OWNER, session.forgot_upto_us), 5.3) == ()
    assert own_keys([*before, since], OWNER, session.forgot_upto_us) == [b"k1"]
    assert own_key(since, OWNER, session.forgot_upto_us) == [b"k1"]
    assert own_keys(before, OWNER) == [b"k1", b"k2", b"k3"]  # (an ACK's: all of them)
    # an ERROR for an ACK sent before the CONSUME: the same
    session.received(batch((b"k4", (), (b"d",)), sent_us=150), 5.4)
    session.received(error("ACK before CONSUME: send CONSUME first"), 6.0)
    assert session.forgot_upto_us == 150
    session.received(error("ACK of unknown key b'x'"), 6.1)  # another ERROR: no change
    assert session.forgot_upto_us == 150


# -- time --------------------------------------------------------------------------

def test_a_heartbeat_goes_once_a_period_passed_with_nothing_sent():
    session = joined(heartbeat_ms=2000)  # sent its CONSUME at 0
    assert session.next_deadline(1.0) == 2.0
    assert session.wake(1.9) == ()
    assert session.wake(2.0) == [[wire.HEARTBEAT]]
    assert session.next_deadline(2.0) == 4.0 and session.wake(3.9) == ()
    session.ack([b"k"], 3.5)  # an answer counts as something sent
    assert session.next_deadline(3.5) == 5.5 and session.wake(4.0) == ()
    assert session.heartbeat(4.5) == [wire.HEARTBEAT] and session.next_deadline(4.5) == 6.5


def test_an_answer_with_no_keys_sends_nothing_and_the_heartbeat_stays_due():
    """A loop that answers every read, also an empty one (``ack_many([])``), sends
    nothing then: the HEARTBEAT must still go, or a node that restarted never says it
    does not know the connection and the consumer never joins again."""
    session = joined(heartbeat_ms=1000)  # sent its CONSUME at 0
    for now in (0.5, 1.0, 1.5):
        assert session.ack([], now) == () and session.nack([], now) == ()
    assert session.wake(1.5) == [[wire.HEARTBEAT]]


def test_joining_again_counts_as_something_sent():
    session = joined(heartbeat_ms=1000)
    session.received(error("HEARTBEAT before CONSUME: send CONSUME first"), 7.0)
    assert session.next_deadline(7.0) == 8.0


# -- the consumer of --send-dsn ----------------------------------------------------

def test_the_original_deliveries_and_answers():
    session = ConsumerSession(Message, OWNER)
    frames = [b"node", *original.encode_delivery(b"key", 5, 7, (b"a", b"b"))]
    message = session.received(frames)
    assert message is not None and (message.peer, message.key, message.parts) == (
        b"node", b"key", (b"a", b"b"))
    assert message.deliveries is None and message._consumer is OWNER
    assert session.answer(message, True) == [b"node", b"key", original.STATUS_OK]
    assert session.answer(message, False) == [b"node", b"key", original.STATUS_FAILED]
    counted = [b"node", *original.encode_delivery(b"key", 5, 7, (b"a",), (b"DELIVERY:4",))]
    again = session.received(counted)
    assert again is not None and again.deliveries == 4
    assert session.next_deadline(1.0) is None


@pytest.mark.parametrize("garbage", [[b"node"], [b"node", b"k", b"x", b"7", b"", b"a"],
                                     [b"node", b"k", b"5", b"7", b"a", b"b"]])
def test_frames_that_are_no_delivery_are_counted(garbage):
    session = ConsumerSession(Message, OWNER)
    assert session.received(garbage) is None and session.malformed == 1


def test_a_batch_of_one_shape_is_read_in_columns_as_entry_by_entry():
    """Entries of one shape (no headers, one part, keys and parts as long) are read in
    columns; a batch of any other shape entry by entry: the same deliveries."""
    session = joined()
    shapes = [
        [(b"k%d" % n, (), (b"%03d" % n,)) for n in range(5)],  # one shape
        [(b"k1", (), (b"ab",)), (b"k2", (), (b"cd",)), (b"k3", (b"TAG:x",), (b"e",))],
        [(b"k1", (), (b"ab",)), (b"k2", (), (b"c", b"d"))],  # two parts, as long
        [(b"k1", (), (b"abc",)), (b"key2", (), (b"d",))],  # two entries of 11 B, unalike
        [(b"k", (), (b"",)), (b"k", (), (b"",))],  # empty parts
    ]
    for entries in shapes:
        session.received(batch(*entries, sent_us=10, ack_timeout_us=3), 1.0)
        taken = session.take(100)
        assert [(m.key, m.parts, m.headers, m.sent_us, m.ack_timeout_us, m.peer)
                for m in taken] == [(key, parts, dict(h.decode().split(":", 1) for h in
                                                      headers), 10, 3, b"")
                                    for key, headers, parts in entries]
        assert all(m._consumer is OWNER for m in taken)
    first, second = (session.received(batch(*shapes[0]), 1.0), session.take(2))[1]
    assert first.headers is not second.headers  # each its own dict
    assert session.malformed == 0


@pytest.mark.parametrize("entries", [
    b"\x02k1\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02ab" * 2 + b"\x02k1",  # cut short
    b"\x02k1\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x09ab",  # a part past the end
])
def test_a_truncated_batch_is_garbage_in_columns_too(entries):
    session = joined()
    session.received(node_says([*wire.deliver_head(b"rid", b"orders", b"g", protocol=2),
                                b"5", b"7", entries]), 1.0)
    assert session.malformed == 1 and not session.arrived


def test_taking_part_of_what_arrived_leaves_the_rest_in_turn():
    session = joined()
    session.received(batch(*[(b"k%d" % n, (), (b"x",)) for n in range(5)]), 1.0)
    arrived = session.arrived
    assert [m.key for m in session.take(2)] == [b"k0", b"k1"]
    assert session.arrived is arrived and [m.key for m in arrived] == [b"k2", b"k3", b"k4"]
    assert [m.key for m in session.take(3)] == [b"k2", b"k3", b"k4"] and not arrived


def test_a_delivery_behaves_as_a_record():
    session = joined()
    session.received(batch((b"k1", (), (b"a",)), (b"k1", (), (b"a",))), 1.0)
    first, second = session.take(2)
    assert first == second and first != (b"k1",) and not first != second
    assert repr(first) == ("Message(key=b'k1', parts=(b'a',), headers={}, sent_us=5, "
                           "ack_timeout_us=7, peer=b'')")
    assert copy.copy(first) == first and copy.copy(first)._consumer is OWNER
    made = Message(key=b"k1", parts=(b"a",), headers={}, sent_us=5, ack_timeout_us=7,
                   peer=b"", _consumer=OWNER)
    assert made == first and bool(made)
    with pytest.raises(TypeError):
        hash(first)
    with pytest.raises(TypeError):
        list(first)
    with pytest.raises(AttributeError):
        first.key = b"k2"  # type: ignore[misc]
    changed = first._replace(key=b"k2")
    assert (changed.key, changed.parts, changed.sent_us, changed._consumer) == (
        b"k2", (b"a",), 5, OWNER)
    assert type(changed) is type(first) and first.key == b"k1"
    with pytest.raises(TypeError, match="no field"):
        first._replace(body=b"x")


def test_an_answer_s_keys_are_read_from_any_iterable_of_deliveries():
    session = joined()
    session.received(batch(*[(b"k%d" % n, (), (b"x",)) for n in range(3)]), 1.0)
    taken = session.take(3)
    assert keys_of(message for message in taken) == [b"k0", b"k1", b"k2"] == keys_of(taken)
    assert request(session.ack(keys_of(iter(taken)), 2.0)[0]).keys == (b"k0", b"k1", b"k2")


@pytest.mark.parametrize("delay", [-1, -0.001, 604_800.5, 1e9, float("nan"), float("inf"),
                                   "5", True, False])
def test_a_nack_delay_the_node_refuses_is_a_value_error_before_sending(delay):
    # the node answered DELAY:-1000 (or beyond a week) with an ERROR the consumer does
    # not read, and the message stayed out at the consumer until its ack deadline
    session = joined()
    with pytest.raises(ValueError, match=r"delay must be from 0 to 604800 s \(a week\)"):
        session.nack([b"k"], 1.0, delay=delay)
    assert request(session.nack([b"k"], 1.0, delay=604_800)[0]).delay_ms == wire.MAX_DELAY_MS


def test_a_group_an_operator_removed_is_refused_and_never_joined_again():
    # a CONSUME again would make the group anew, from its start: REMOVE GROUP undone
    session = joined()
    with pytest.raises(ConsumeRefused, match="^group g of topic orders was removed$"):
        session.received(error("group g of topic orders was removed"), 5.0)
    with pytest.raises(ConsumeRefused, match="was removed"):  # the heartbeat's answer
        session.received(error("HEARTBEAT before CONSUME: send CONSUME first"), 6.0)
    assert session.removed == "group g of topic orders was removed"
    with pytest.raises(ConsumeRefused, match="^group g of topic orders was removed$"):
        session.refuse_if_removed()  # a receive's, with no frame come


def test_deliveries_that_arrived_before_the_refusal_are_not_taken():
    # the node gave them back (or removed them with the group): an ACK would be refused
    session = joined()
    session.received(deliver(b"k1", b"body"), 4.0)
    with pytest.raises(ConsumeRefused):
        session.received(error("group g of topic orders was removed"), 5.0)
    assert session.take(10) == []


def test_a_group_the_keys_rights_no_longer_give_is_refused_and_never_joined_again():
    # the node let the consumer go after new --authorization rules: the session kept
    # the words in errors and waited on, its receive None, as if nothing came
    session = joined()
    said = "FORBIDDEN consume orders:g: the node's --authorization rules changed"
    with pytest.raises(ConsumeRefused, match=f"^{said}$"):
        session.received(error(said), 5.0)
    with pytest.raises(ConsumeRefused, match="rules changed"):
        session.received(error("HEARTBEAT before CONSUME: send CONSUME first"), 6.0)


def test_an_unanswered_join_asks_once_whether_a_router_is_there():
    """A consumer that does not wait for its join (a routed consumer's, ``answered``)
    asks here: a second after its CONSUME went, once; its answer refuses a DEALER's
    endpoint (a node's --send-dsn) and ends the asking for that join."""
    session = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    session.consume(10.0)
    assert session.router_check_at == 10.0 + ROUTER_CHECK_AFTER_S
    assert not session.router_check_due(10.5)
    assert session.router_check_due(11.0)
    assert not session.router_check_due(12.0)  # asked: not again for this join
    with pytest.raises(ConsumeRefused, match="a DEALER answers there"):
        session.router_told([("tcp://node:11132", False)])
    session.consume(20.0)  # a join again: asked again
    session.router_told([("tcp://node:11135", True)])  # a ROUTER: wait on
    assert session.router_check_at is None and not session.router_check_due(30.0)


def test_a_joined_session_asks_nothing():
    session = GroupSession(SUBSCRIBE, Message, OWNER, now=0.0)
    session.consume(0.0)
    session.received(consuming(), 0.5)
    assert session.router_check_at is None and not session.router_check_due(5.0)
