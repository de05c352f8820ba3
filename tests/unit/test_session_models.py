"""The client sessions against small models, with hypothesis: a node that answers in
any order, refuses batches, learns nothing or everything, loses connections.

Producer: every message sent gets exactly one ACK, whatever the node answers and in
whatever order; the window is never passed; an ACK kept, dropped or taken is counted
once. Group consumer: every key the node refused while it did not know the
connection is sent to it again exactly once (with the CONSUME, or after it), and no
second CONSUME goes while one is on its way."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pzq.client.message import Message
from pzq.client.sessions.group import GroupSession
from pzq.client.sessions.producer import ProducerSession
from pzq.protocol import consume as wire
from pzq.protocol import frames as original
from pzq.protocol import produce_batches as batches

pytestmark = pytest.mark.timeout(60)
SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None)


class ProducerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.session = ProducerSession(window=6, batch=3, keep_acks=4, id_prefix=b"p")
        self.held: list[list[bytes]] = []  # frames the node has, not yet answered
        self.sent: set[bytes] = set()
        self.answered: list[bytes] = []  # msg ids, as the session reported them
        self.taken = 0
        self.now = 0.0
        self.count = 0

    def _out(self, frames: list[bytes] | None) -> None:
        if frames is not None:
            self.held.append(frames)

    @precondition(lambda self: not self.session.full)
    @rule()
    def send(self) -> None:
        msg_id = b"m%d" % self.count
        self.count += 1
        self.sent.add(msg_id)
        self._out(self.session.add(msg_id, [b"body"], [], self.now))

    @rule()
    def flush(self) -> None:
        self._out(self.session.pending_batch())

    @rule()
    def due(self) -> None:
        self._out(self.session.due_batch())

    @precondition(lambda self: self.held)
    @rule(data=st.data(), speaks=st.booleans(), unreadable=st.booleans(),
          refuse=st.integers(-1, 3))
    def answer(self, data: st.DataObject, speaks: bool, unreadable: bool,
               refuse: int) -> None:
        """The node answers one frame it holds, any of them."""
        frames = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        self.now += 0.25
        if batches.is_batch([b"rid", *frames]):
            members = batches.decode_batch([b"rid", *frames], 100)
            if unreadable:
                answer = original.encode_producer_ack(b"rid", frames[0], False, b"bad")
            else:
                answer = batches.encode_batch_ack(b"rid", frames[0], [
                    (index != refuse, b"") for index in range(len(members))])
        else:
            answer = original.encode_producer_ack(b"rid", frames[0], refuse != 0)
            if speaks and batches.PROTOCOL_HEADER in frames:
                answer.insert(3, batches.PROTOCOL_HEADER)
        acks = self.session.received(answer[1:], self.now)
        self.answered += [ack.msg_id for ack in acks]

    @rule()
    def take(self) -> None:
        self.taken += len(self.session.take_acks())

    @invariant()
    def every_message_answered_once_and_the_window_kept(self) -> None:
        session = self.session
        assert len(session.unanswered) <= session.window
        assert len(self.answered) == len(set(self.answered))
        assert set(session.unanswered) == self.sent - set(self.answered)
        assert self.taken + len(session.arrived) + session.acks_dropped == len(self.answered)

    def teardown(self) -> None:
        """Everything flushed and answered: nothing is left without its ACK."""
        self._out(self.session.pending_batch())
        while self.held:
            self.answer_all()
        assert set(self.answered) == self.sent

    def answer_all(self) -> None:
        frames = self.held.pop(0)
        if batches.is_batch([b"rid", *frames]):
            count = len(batches.decode_batch([b"rid", *frames], 100))
            answer = batches.encode_batch_ack(b"rid", frames[0], [(True, b"")] * count)
        else:
            answer = original.encode_producer_ack(b"rid", frames[0], True)
        self.answered += [ack.msg_id for ack in self.session.received(answer[1:], self.now)]


LOST = "HEARTBEAT before CONSUME: send CONSUME first"
ACK_LOST = "ACK before CONSUME: send CONSUME first"


class RejoinModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        subscribe = wire.Subscribe("orders", "g", 10, protocol=2)
        self.session = GroupSession(subscribe, Message, None, now=0.0)
        self.session.consume(0.0)
        self.session.received([wire.CONSUMING, b"orders", b"g", b"10", b"1000",
                               b"PROTOCOL:2"], 0.0)
        self.refused: list[bytes] = []
        self.resent: list[bytes] = []
        self.consumes_on_the_way = 0
        self.count = 0

    def _sent(self, out: object) -> None:
        for frames in out:  # type: ignore[attr-defined]
            request = wire.decode_request(frames)
            if request.verb == wire.CONSUME:
                assert request.subscribe is not None
                self.resent += request.subscribe.acked
                self.consumes_on_the_way += 1
            elif request.verb == wire.ACK:
                self.resent += request.keys

    @rule(lost=st.sampled_from([LOST, ACK_LOST]))
    def the_node_does_not_know_the_connection(self, lost: str) -> None:
        self._sent(self.session.received([wire.ERROR, lost.encode()], 1.0))

    @rule(count=st.integers(1, 3))
    def the_node_refuses_acks(self, count: int) -> None:
        keys = [b"0000abcd-%016x" % (self.count + n) for n in range(count)]  # (real keys)
        self.count += count
        self.refused += keys
        self._sent(self.session.received([wire.REFUSED, wire.ACK, *keys], 1.0))

    @precondition(lambda self: self.consumes_on_the_way)
    @rule()
    def the_node_takes_the_consume(self) -> None:
        self.consumes_on_the_way = 0
        self._sent(self.session.received([wire.CONSUMING, b"orders", b"g", b"10", b"1000",
                                          b"PROTOCOL:2"], 1.0))

    @invariant()
    def refused_keys_go_again_once_and_one_consume_at_a_time(self) -> None:
        assert self.consumes_on_the_way <= 1
        assert len(self.resent) == len(set(self.resent))
        assert set(self.resent) <= set(self.refused)
        if self.consumes_on_the_way or not self.refused:
            return
        assert set(self.resent) == set(self.refused)  # joined: every refused key went

    def teardown(self) -> None:
        """Once the node takes the CONSUME on its way, every refused key went again."""
        if self.consumes_on_the_way:
            self.the_node_takes_the_consume()
        assert sorted(self.resent) == sorted(self.refused)


TestProducerModel = ProducerModel.TestCase
TestProducerModel.settings = SETTINGS
TestRejoinModel = RejoinModel.TestCase
TestRejoinModel.settings = SETTINGS
