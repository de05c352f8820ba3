"""The producer's session without a socket: frames and times in, frames and ACKs out."""

from __future__ import annotations

import pytest

from pzq.client.sessions.producer import ProducerSession, topic_headers
from pzq.errors import DecodeError, ProduceRefused
from pzq.protocol import frames as wire
from pzq.protocol import produce_batches as batches
from pzq.protocol.frame_groups import LENGTH, group_chunks

pytestmark = pytest.mark.timeout(10)


def ack_of(frames: list[bytes], ok: bool = True, text: bytes = b"",
           speaks_batches: bool = False) -> list[bytes]:
    """A node's ACK of one message sent alone, as the producer's DEALER receives it."""
    ack = wire.encode_producer_ack(b"rid", frames[0], ok, text)[1:]
    if speaks_batches:
        ack.insert(2, batches.PROTOCOL_HEADER)
    return ack


def batch_ack_of(frames: list[bytes], refuse: int = -1) -> list[bytes]:
    """A node's ACK of a produce batch: each member stored, but the ``refuse``-th."""
    members = batches.decode_batch([b"rid", *frames], max_body_size=1000)
    results = [(index != refuse, b"" if index != refuse else b"no")
               for index, _ in enumerate(members)]
    return batches.encode_batch_ack(b"rid", frames[0], results)[1:]


def learnt(window: int = 8, batch: int | None = None,
           keep_acks: int = 100) -> tuple[ProducerSession, list[bytes]]:
    """A session whose first message asked and was answered: it speaks batches."""
    session = ProducerSession(window, batch, keep_acks, id_prefix=b"p")
    first = session.add(b"first", [b"x"], [], now=0.0)
    assert first is not None and batches.PROTOCOL_HEADER in first  # the question
    assert [ack.msg_id for ack in session.received(ack_of(first, speaks_batches=True),
                                                   1.0)] == [b"first"]
    assert session.protocol == 2
    return session, first


def test_the_first_message_asks_and_a_node_that_does_not_answer_keeps_protocol_1():
    session = ProducerSession(window=8, id_prefix=b"p")
    first = session.add(b"a", [b"x"], [b"TOPIC:t"], now=0.0)
    assert first == [b"a", b"TOPIC:t", batches.PROTOCOL_HEADER, b"", b"x"]
    second = session.add(b"b", [b"y"], [], now=0.0)
    assert second == [b"b", b"", b"y"]  # asked once only
    assert [ack.msg_id for ack in session.received(ack_of(first), 0.5)] == [b"a"]
    assert session.protocol == 1
    assert session.add(b"c", [b"z"], [], now=1.0) == [b"c", b"", b"z"]  # alone, as before


def test_batch_1_never_asks():
    session = ProducerSession(window=8, batch=1)
    assert session.add(b"a", [b"x"], [], now=0.0) == [b"a", b"", b"x"]


def test_messages_wait_for_a_full_batch_while_others_are_out():
    session, _ = learnt(window=8)  # batch 2: a quarter of the window
    alone = session.add(b"m0", [b"0"], [], now=2.0)
    assert alone is not None and alone[1] == b"BATCH:1"  # nothing was out: it goes
    assert session.add(b"m1", [b"1"], [], now=2.0) is None  # waits for a second
    full = session.add(b"m2", [b"2"], [], now=2.0)
    assert full is not None and full[1] == b"BATCH:2"
    assert [ack.msg_id for ack in session.received(batch_ack_of(full), 3.0)] == [b"m1", b"m2"]
    assert [ack.msg_id for ack in session.received(batch_ack_of(alone), 3.5)] == [b"m0"]
    assert list(session.latencies) == [1.0, 1.0, 1.0, 1.5]
    assert not session.unanswered


def test_a_batch_answers_each_member_in_order_and_the_window_bounds_all():
    session, _ = learnt(window=4, batch=3)
    sent = [session.add(b"m%d" % n, [b"%d" % n], [], now=2.0) for n in range(4)]
    assert sent[0] is not None and sent[1:3] == [None, None] and sent[3] is not None
    assert session.full and session.due_batch() is None  # m0, then a batch of three
    acks = session.received(batch_ack_of(sent[3], refuse=1), 2.25)
    assert [(ack.msg_id, ack.ok) for ack in acks] == [(b"m1", True), (b"m2", False),
                                                      (b"m3", True)]
    assert acks[1].status_message == b"no" and not session.full
    assert [ack.msg_id for ack in session.take_acks()] == [b"first", b"m1", b"m2", b"m3"]
    assert session.take_acks() == []


def test_a_waiting_batch_is_due_when_nothing_else_is_out():
    session, _ = learnt(window=8, batch=4)
    out = session.add(b"m0", [b"0"], [], now=2.0)
    assert session.add(b"m1", [b"1"], [], now=2.0) is None
    assert session.due_batch() is None  # m0 is out: its ACK comes first
    session.received(batch_ack_of(out), 2.5)
    due = session.due_batch()
    assert due is not None and due[1] == b"BATCH:1"
    assert session.pending_batch() is None and session.next_deadline(3.0) is None


def test_messages_out_past_the_ack_timeout_are_given_up_and_a_late_ack_ignored():
    session, _ = learnt(window=4, batch=2)
    session.ack_timeout = 10.0
    alone = session.add(b"m0", [b"0"], [], now=2.0)  # went at 2
    assert session.add(b"m1", [b"1"], [], now=3.0) is None
    pair = session.add(b"m2", [b"2"], [], now=4.0)  # m1 and m2 went at 4
    assert session.add(b"m3", [b"3"], [], now=5.0) is None  # waits for its batch
    assert session.full and session.next_deadline(5.0) == 12.0
    assert session.overdue(11.9) == []
    assert session.overdue(12.0) == [b"m0"] and session.next_deadline(12.0) == 14.0
    assert session.due_batch(12.0) is None  # m1 and m2 are still out
    assert session.overdue(14.0) == [b"m1", b"m2"]
    assert list(session.unanswered) == [b"m3"]  # never sent: not given up
    due = session.due_batch(14.0)
    assert due is not None and session.next_deadline(14.0) == 24.0
    assert alone is not None and pair is not None
    assert session.received(batch_ack_of(alone), 15.0) == []  # too late: ignored
    assert session.received(batch_ack_of(pair), 15.0) == []
    assert [ack.msg_id for ack in session.received(batch_ack_of(due), 15.0)] == [b"m3"]
    assert not session.unanswered and session.next_deadline(15.0) is None
    assert session.overdue(100.0) == []


def test_a_sync_shell_s_given_up_messages_come_as_acks_the_client_made():
    session = ProducerSession(window=4, batch=1, ack_timeout=10.0)
    session.add(b"m0", [b"0"], [], now=2.0)
    answered = session.add(b"m1", [b"1"], [], now=3.0)
    assert answered is not None
    session.received(ack_of(answered), 4.0)
    assert session.give_up(11.9) == []
    given_up = session.give_up(12.0)
    assert given_up == [(b"m0", False, wire.NO_ACK)] and given_up[0].given_up
    assert [ack.msg_id for ack in session.take_acks()] == [b"m1", b"m0"]  # as they came
    assert not session.unanswered and session.give_up(100.0) == []


def test_only_the_client_s_no_ack_is_given_up():
    assert wire.ProducerAck(b"m", False, wire.NO_ACK).given_up
    assert not wire.ProducerAck(b"m", True, wire.NO_ACK).given_up
    assert not wire.ProducerAck(b"m", False, b"queue is full").given_up
    assert not wire.ProducerAck(b"m", True, wire.DUPLICATE).given_up


def test_without_an_ack_timeout_nothing_is_given_up():
    session, _ = learnt(window=4, batch=2)
    session.add(b"m0", [b"0"], [], now=2.0)
    assert session.overdue(1e9) == [] and session.next_deadline(1e9) is None
    assert list(session.unanswered) == [b"m0"]
    with pytest.raises(ValueError, match="ack_timeout must be more than 0 s"):
        ProducerSession(ack_timeout=0)


def test_a_batch_the_node_cannot_read_fails_every_member():
    session, _ = learnt(window=8, batch=2)
    session.add(b"m0", [b"0"], [], now=2.0)
    sent = session.add(b"m1", [b"1"], [], now=2.0)
    assert sent is None  # waits: m0 is out
    batch = session.pending_batch()
    assert batch is not None
    refused = wire.encode_producer_ack(b"rid", batch[0], False, b"the batch is bad")[1:]
    acks = session.received(refused, 3.0)
    assert [(ack.msg_id, ack.ok, ack.status_message) for ack in acks] == [
        (b"m1", False, b"the batch is bad")]


@pytest.mark.parametrize("frames", [
    [b"unknown-id", b"1", b""],  # an ACK of nothing of ours
    [b"x"],
    [b"id", b"7", b""],  # a status that is not one
    [b"id", b"1"],  # no empty frame
    [b"batch", b"1", b"BATCH:2", b"", b"\x31\x00"],  # truncated results
    [b"batch", b"1", b"BATCH:1", b""],  # a batch ACK without results
])
def test_garbage_and_foreign_acks_are_ignored(frames):
    session = ProducerSession(window=2, id_prefix=b"p")
    session.add(b"id", [b"x"], [], now=0.0)
    assert session.received(frames, 1.0) == []
    assert list(session.unanswered) == [b"id"] and not session.arrived


def test_a_batch_ack_of_another_count_is_not_taken():
    session, _ = learnt(window=8, batch=2)
    sent = session.add(b"m0", [b"0"], [], now=2.0)  # alone: a batch of one
    assert sent is not None
    wrong = batches.encode_batch_ack(b"rid", sent[0], [(True, b""), (True, b"")])[1:]
    assert session.received(wrong, 3.0) == [] and b"m0" in session.unanswered


def test_kept_acks_and_latencies_are_bounded_and_drops_counted():
    session = ProducerSession(window=100, batch=1, keep_acks=3)
    sent = [session.add(b"m%d" % n, [b"x"], [], now=float(n)) for n in range(5)]
    for n, frames in enumerate(sent):
        assert frames is not None
        session.received(ack_of(frames), float(n) + 0.5)
    assert [ack.msg_id for ack in session.take_acks()] == [b"m2", b"m3", b"m4"]
    assert session.acks_dropped == 2 and list(session.latencies) == [0.5, 0.5, 0.5]


def test_a_batch_beyond_the_kept_acks_counts_what_it_drops():
    session, _ = learnt(window=8, batch=4, keep_acks=2)
    alone = session.add(b"m0", [b"0"], [], now=2.0)
    batch = [session.add(b"m%d" % n, [b"x"], [], now=3.0) for n in range(1, 5)][-1]
    assert alone is not None and batch is not None and batch[1] == b"BATCH:4"
    session.received(batch_ack_of(alone), 3.5)
    session.received(batch_ack_of(batch), 4.0)
    assert [ack.msg_id for ack in session.take_acks()] == [b"m3", b"m4"]
    assert session.acks_dropped == 4  # first, m0, m1, m2
    assert list(session.latencies) == [1.0, 1.0]  # m3's and m4's


def test_a_shell_that_takes_acks_from_received_keeps_none():
    """The asyncio shell resolves a future per ACK from ``received``'s answer:
    ``arrived`` stays empty and nothing is counted as dropped, alone or in batches."""
    session = ProducerSession(window=8, batch=2, keep_acks=1, id_prefix=b"p",
                              keep_arrived=False)
    first = session.add(b"first", [b"x"], [], now=0.0)
    assert first is not None
    taken = session.received(ack_of(first, speaks_batches=True), 0.5)
    assert [ack.msg_id for ack in taken] == [b"first"] and session.protocol == 2
    alone = session.add(b"m0", [b"0"], [], now=1.0)
    batch = [session.add(b"m%d" % n, [b"x"], [], now=1.0) for n in (1, 2)][-1]
    assert alone is not None and batch is not None
    taken = session.received(batch_ack_of(alone), 2.0) + session.received(batch_ack_of(batch),
                                                                           2.0)
    assert [ack.msg_id for ack in taken] == [b"m0", b"m1", b"m2"]
    assert not session.arrived and session.acks_dropped == 0 and not session.unanswered
    assert list(session.latencies) == [1.0]  # keep_acks bounds the latencies still


def test_one_message_s_ack_is_taken_alone():
    session = ProducerSession(window=4, batch=1)
    first, second = (session.add(b"m%d" % n, [b"x"], [], now=0.0) for n in range(2))
    assert first is not None and second is not None
    session.received(ack_of(second), 1.0)
    session.received(ack_of(first), 1.0)
    assert session.take_ack(b"m0") is not None and session.take_ack(b"m0") is None
    assert [ack.msg_id for ack in session.take_acks()] == [b"m1"]


def test_ack_kinds_come_through():
    session = ProducerSession(window=4, batch=1)
    sent = session.add(b"m", [b"x"], [], now=0.0)
    assert sent is not None
    (ack,) = session.received(ack_of(sent, text=wire.REPLICATION_FAILED), 1.0)
    assert ack.ok and ack.replication_failed


def test_options_are_checked_and_headers_made():
    with pytest.raises(ValueError, match="window"):
        ProducerSession(window=0)
    with pytest.raises(ValueError, match="batch must be from 1"):
        ProducerSession(window=4, batch=batches.MAX_MESSAGES + 1)
    with pytest.raises(ValueError, match="keep_acks"):
        ProducerSession(keep_acks=0)
    assert ProducerSession(window=10_000).batch == 1000
    assert topic_headers("t", "eu", "d1") == [b"TOPIC:t", b"TAG:eu", b"DEDUP-ID:d1"]
    assert topic_headers("t", None, key=b"k1") == [b"TOPIC:t", b"KEY:k1"]
    assert topic_headers(None, None, b"d", "k") == [b"DEDUP-ID:d", b"KEY:k"]
    assert topic_headers(None, None, b"\x01") == [b"DEDUP-ID:\x01"]


def test_a_batch_s_members_are_what_the_node_reads():
    """What a session sends, the node's own decoder reads, member by member."""
    session, _ = learnt(window=12, batch=3)
    assert session.add(b"m0", [b"a", b"b"], [b"TOPIC:t"], now=2.0) is not None  # alone
    assert session.add(b"m1", [b"c", b"d"], [b"TOPIC:t"], now=2.0) is None
    assert session.add(b"m2", [b"e"], [b"KEY:k"], now=2.0) is None
    frames = session.pending_batch()
    assert frames is not None
    members = batches.decode_batch([b"rid", *frames], max_body_size=100)
    assert not any(isinstance(member, ProduceRefused) for member in members)
    assert [(produce.headers, produce.body_size) for produce, _ in members] == [
        ((b"TOPIC:t",), 2), ((b"KEY:k",), 1)]


@pytest.mark.parametrize(("headers", "parts"), [
    ((), (b"",)), ((b"TOPIC:t",), (b"body",)),
    ((b"TOPIC:t", b"TAG:x" * 70), (b"a", b"", b"c" * 300)),
])
def test_an_entry_is_the_frame_groups_layout(headers, parts):
    """Wire bytes as ever: the message id after its length, then two counted groups."""
    entry = batches.encode_entry(b"m-1", headers, parts)
    assert entry == b"".join([LENGTH.pack(3), b"m-1", *group_chunks(headers),
                              *group_chunks(parts)])


def test_an_all_stored_answer_and_a_mixed_one_read_alike():
    stored = batches.encode_batch_ack(b"rid", b"b", [(True, b"")] * 3)[1:]
    assert batches.decode_batch_ack(stored).results == ((True, b""),) * 3
    mixed = batches.encode_batch_ack(b"rid", b"b", [(True, b""), (False, b"no"),
                                                    (True, b"DUPLICATE")])[1:]
    assert batches.decode_batch_ack(mixed).results == ((True, b""), (False, b"no"),
                                                       (True, b"DUPLICATE"))
    short = [*stored[:4], stored[4][:-3]]  # two results for BATCH:3
    with pytest.raises(DecodeError):
        batches.decode_batch_ack(short)


def test_a_batch_whose_member_was_answered_already_answers_the_rest():
    """The bulk answer needs every member unanswered; else member by member."""
    session, _ = learnt(window=8, batch=3)
    session.add(b"m0", [b"0"], [], now=2.0)  # alone
    session.add(b"m1", [b"1"], [], now=2.0)
    session.add(b"m2", [b"2"], [], now=2.0)
    sent = session.add(b"m3", [b"3"], [], now=2.0)
    assert sent is not None
    del session.unanswered[b"m2"]  # (as if answered before: nothing to take)
    acks = session.received(batch_ack_of(sent), 2.5)
    assert acks == [wire.ProducerAck(b"m1", True, b""), wire.ProducerAck(b"m3", True, b"")]
    assert list(session.latencies) == [1.0, 0.5, 0.5]


def test_acks_of_a_stored_batch_are_whole_acks():
    session, _ = learnt(window=8, batch=2)
    session.add(b"m0", [b"0"], [], now=2.0)
    session.add(b"m1", [b"1"], [], now=2.0)
    sent = session.add(b"m2", [b"2"], [], now=2.0)
    assert sent is not None
    acks = session.received(batch_ack_of(sent), 3.0)
    assert [type(ack) for ack in acks] == [wire.ProducerAck] * 2
    assert [(ack.msg_id, ack.ok, ack.status_message, ack.duplicate, ack.replication_failed)
            for ack in acks] == [(b"m1", True, b"", False, False),
                                 (b"m2", True, b"", False, False)]
    assert list(session.latencies) == [1.0, 1.0, 1.0]


def test_message_ids_are_the_prefix_and_a_count_whatever_the_prefix_holds():
    session = ProducerSession(window=4, id_prefix=b"p%d%s")
    assert [session.next_msg_id(), next(session.ids)] == [b"p%d%s-0", b"p%d%s-1"]
