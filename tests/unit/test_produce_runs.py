"""A produce batch's members read as runs (pzq.protocol.batch_runs), stored together
and answered together (pzq.node.intake, pzq.node.batch_acks): the runs' edges, and a
node's loop on inproc endpoints driven wake by wake for what the store and the
producer see."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.bulk import CUT_AT_ONCE
from pzq.errors import DecodeError, ProduceRefused
from pzq.node.batch_acks import BatchAcks
from pzq.node.device import Device
from pzq.protocol import frames
from pzq.protocol import produce_batches as batches
from pzq.protocol.batch_runs import MemberRun, member_token, read_runs
from pzq.store import keyspace, record
from tests.support.devices import producer_socket, wake
from tests.support.stored import FailNext, stored_log

# what a refused message's ACK says after its topic
NOT_YOURS = b": this client key may not produce to that topic (see the node's " \
    b"--authorization file)"

pytestmark = pytest.mark.timeout(30)
Sockets = Callable[[int], zmq.Socket]
TOPIC = [b"TOPIC:orders"]


def entry(msg_id: bytes, body: bytes, headers: list[bytes] = TOPIC) -> bytes:
    return batches.encode_entry(msg_id, headers, [body])


def shape(found: list[MemberRun | ProduceRefused]) -> list[tuple[int, int] | str]:
    """Each run as (first, members), each refused one as its reason's first word."""
    return [(member.first, len(member.entries)) if isinstance(member, MemberRun)
            else member.reason.split()[0] for member in found]


# -- the runs, as pure functions ------------------------------------------------

@pytest.mark.parametrize("entries, expected", [
    ([entry(b"%02d" % n, b"body") for n in range(5)], [(0, 5)]),  # one shape: cut in C
    # one size, not one shape (ids and bodies of other lengths): entry by entry
    ([entry(b"a", b"xyz"), entry(b"abc", b"x")], [(0, 2)]),
    ([entry(b"a", b"1", [b"TOPIC:ab"]), entry(b"b", b"2", [b"TOPIC:cd"])], [(0, 1), (1, 1)]),
    ([entry(b"a", b"1"), entry(b"b", b"2"), entry(b"c", b"3", [b"TOPIC:audit"]),
      entry(b"d", b"4")], [(0, 2), (2, 1), (3, 1)]),
    ([entry(b"a", b"1"), entry(b"b", b"2", [b"REPLICA:x"]), entry(b"c", b"3"),
      entry(b"d", b"4")], [(0, 1), "header", (2, 2)]),
    ([entry(b"a", b"1"), entry(b"b", b"x" * 200), entry(b"c", b"3")],
     [(0, 1), "message", (2, 1)]),
    ([entry(b"%d" % n, b"1", [b"REPLICA:x"]) for n in range(3)], ["header"] * 3),
    ([entry(b"%d" % n, b"x" * 200) for n in range(3)], ["message"] * 3),
    ([entry(b"a", b"1"), batches.encode_entry(b"b", TOPIC, [])], [(0, 1), "message"]),
], ids=["one-shape", "one-size", "one-size-two-groups", "groups", "refused-group", "too-big",
        "one-shape-refused", "one-shape-too-big", "no-body"])
def test_members_in_runs(entries, expected):
    found = read_runs(b"rid", b"B", b"".join(entries), len(entries), 100)
    assert shape(found) == expected
    runs = [member for member in found if isinstance(member, MemberRun)]
    assert [entry for run in runs for entry in run.entries] == \
        [entries[index] for run in runs for index in range(run.first,
                                                           run.first + len(run.entries))]
    refused = [member for member in found if isinstance(member, ProduceRefused)]
    assert all(member.routing_id == b"rid" and member.msg_id.startswith(b"B\x00")
               for member in refused)


@pytest.mark.parametrize("entries, sizes", [
    ([entry(b"a", b"xyz"), entry(b"abc", b"x"), entry(b"b", b"xy")], [3, 1, 2]),
    ([entry(b"a", b"xyz"), entry(b"abc", b"x")], [3, 1]),  # one size, not one shape
    ([entry(b"a", b"xyz"), entry(b"b", b"abc")], [3, 3]),
])
def test_a_run_knows_its_sizes_and_tokens(entries, sizes):
    (run,) = read_runs(b"rid", b"B%d", b"".join(entries), len(entries), 100)
    assert isinstance(run, MemberRun) and run.headers == tuple(TOPIC)
    assert run.body_sizes == sizes
    assert run.tokens(b"B%d") == [member_token(b"B%d", n) for n in range(len(entries))]


@pytest.mark.parametrize("data, count", [
    (b"".join(entry(b"%d" % n, b"body") for n in range(4)), 3),  # more than it says
    (b"".join(entry(b"%d" % n, b"body") for n in range(4)), 5),  # fewer
    (b"".join(entry(b"%d" % n, b"body") for n in range(4))[:-1], 4),  # cut
    (entry(b"a", b"body") + b"\x00\x00", 1),  # a tail after the last entry
])
def test_entries_that_are_not_what_the_batch_says_are_not_read(data, count):
    with pytest.raises(DecodeError):
        read_runs(b"rid", b"B", data, count, 100)


@pytest.mark.parametrize("count", [1, CUT_AT_ONCE, CUT_AT_ONCE + 1, 2 * CUT_AT_ONCE + 44])
@pytest.mark.parametrize("odd_at", [None, 0, -1, CUT_AT_ONCE + 3])
def test_a_batch_of_one_shape_is_one_run_of_its_entries_and_records_of_any_length(count,
                                                                                   odd_at):
    """Read and made CUT_AT_ONCE entries at a time: one entry of another shape, in any
    of the struct's pieces, makes the batch walked entry by entry (same runs)."""
    entries = [entry(b"%05d" % n, b"body%04d" % n) for n in range(count)]
    one_shape = odd_at is None or count == 1 or not -count <= odd_at < count
    if not one_shape:
        entries[odd_at] = entry(b"%05d" % (odd_at % count), b"longer body")
    (run,) = read_runs(b"rid", b"B", b"".join(entries), count, 100)
    assert isinstance(run, MemberRun) and list(run.entries) == entries
    assert run.size == (len(entries[0]) if one_shape else 0)
    if one_shape:
        fixed = record.fixed(123)
        assert list(record.records_of(fixed, run.entries, run.size)) == \
            [fixed + one for one in entries]


def test_a_batch_of_the_last_ones_size_and_count_is_read_as_its_own_shape():
    """Shapes are kept by a batch's size and count: one of another header group, msg
    id length or body size with the same ones, or of no one shape, is its own."""
    ab, cd = [b"TOPIC:ab"], [b"TOPIC:cd"]
    batches_in_turn = [  # (entries, their header group, their body sizes)
        ([entry(b"%02d" % n, b"body", ab) for n in range(3)], ab, [4] * 3),
        ([entry(b"%02d" % n, b"body", cd) for n in range(3)], cd, [4] * 3),
        ([entry(b"%03d" % n, b"bod", cd) for n in range(3)], cd, [3] * 3),
        ([entry(b"0", b"bodyy", ab), entry(b"011", b"bod", ab), entry(b"02", b"body", ab)],
         ab, [5, 3, 4]),  # no one shape
        ([entry(b"%02d" % n, b"body", ab) for n in range(3)], ab, [4] * 3),
    ]
    assert len({len(b"".join(entries)) for entries, _, _ in batches_in_turn}) == 1
    for entries, headers, sizes in batches_in_turn:
        (run,) = read_runs(b"rid", b"B", b"".join(entries), 3, 100)
        assert isinstance(run, MemberRun) and list(run.entries) == entries
        assert (run.headers, run.body_sizes) == (tuple(headers), sizes)
    (refused,) = read_runs(b"rid", b"B", entry(b"a", b"x" * 101), 1, 100)
    (run,) = read_runs(b"rid", b"B", entry(b"a", b"x" * 101), 1, 200)  # another limit
    assert isinstance(refused, ProduceRefused) and isinstance(run, MemberRun)


def test_a_batch_stored_whole_is_answered_as_every_answer_would_be():
    acks = BatchAcks()
    whole = acks.answer_run(acks.expect(b"rid", b"B", 3), 0, 3)
    assert not acks.open
    assert whole == batches.encode_batch_ack(b"rid", b"B", [(True, b"")] * 3)


# -- the batch's one ACK ------------------------------------------------------------

def test_a_batch_is_answered_once_by_runs_and_members_in_any_order():
    acks = BatchAcks()
    open_batch = acks.expect(b"rid", b"B\x001", 5)  # a batch id may hold the separator
    assert acks.answer_run(open_batch, 0, 2) == []
    assert acks.answer(b"rid", member_token(b"B\x001", 4), False, b"why") == []
    assert acks.answer(b"rid", member_token(b"B\x001", 4), True, b"") is None  # answered
    assert acks.answer(b"other", member_token(b"B\x001", 2), True, b"") is None
    assert acks.answer(b"rid", b"B\x001\x0002", True, b"") is None  # not a member's name
    assert acks.answer(b"rid", b"B\x001\x009", True, b"") is None  # past its members
    assert acks.answer(b"rid", b"plain", True, b"") is None
    assert acks.answer(b"rid", member_token(b"B\x001", 2), True, b"") == []
    ack = acks.answer_run(open_batch, 3, 1)
    assert not acks and batches.decode_batch_ack(ack[1:]).results == (
        (True, b""), (True, b""), (True, b""), (True, b""), (False, b"why"))
    assert ack[2] == frames.STATUS_FAILED


def test_a_batch_id_used_again_while_open_keeps_each_batch_apart():
    acks = BatchAcks()
    first = acks.expect(b"rid", b"B", 2)
    second = acks.expect(b"rid", b"B", 1)
    assert acks.answer_run(second, 0, 1)  # the second one is answered, the first waits
    assert acks.answer_run(first, 0, 1) == [] and acks.answer_run(first, 1, 1)


# -- a node's loop ----------------------------------------------------------------

@pytest.fixture
def device(open_device: Callable[..., Device]) -> Device:
    return open_device("--max-message-size", "100")


@pytest.fixture
def producer(open_socket: Sockets, device: Device) -> zmq.Socket:
    return producer_socket(device, open_socket)


def answer_of(device: Device, socket: zmq.Socket) -> batches.BatchAck:
    for _ in range(50):
        wake(device, 100)
        if socket.poll(0):
            return batches.decode_batch_ack(socket.recv_multipart())
    raise AssertionError("no ACK")


def stored_records(device: Device) -> list[record.Record]:
    store = device.node.store
    return [record.decode(value) for _, value in store.scan(keyspace.OWN_PREFIX)]


def test_a_mixed_batch_stores_its_runs_together_and_the_rest_one_by_one(device, producer):
    """Runs stored together beside members that need a look at each (a DEDUP-ID and
    its repeat, a due time, a refused header, a body too big): each is answered as
    it would be alone, in the batch's one ACK; the records and the topic's log are
    those of messages stored one by one."""
    topics, store = device.node.topics, device.node.store
    batch = store.begin()
    for name in ("orders", "audit"):  # read by a group: its log is kept
        topics.add_group(topics.topic(name, 1), "g", 0, "", 1)
    store.commit(batch)
    members = [entry(b"a", b"1"), entry(b"b", b"2"),
               entry(b"c", b"3", [*TOPIC, b"DEDUP-ID:x"]),
               entry(b"d", b"4", [*TOPIC, b"DEDUP-ID:x"]),
               entry(b"e", b"5", [*TOPIC, b"DELAY:60000"]),
               entry(b"f", b"6", [*TOPIC, b"REPLICA:x"]),
               entry(b"g", b"x" * 101),
               entry(b"h", b"8", [b"TOPIC:audit"]), entry(b"i", b"9", [b"TOPIC:audit"]),
               entry(b"j", b"10")]
    producer.send_multipart(batches.encode_batch(b"mixed", members))
    answer = answer_of(device, producer)
    assert [ok for ok, _ in answer.results] == [True] * 5 + [False, False] + [True] * 3
    assert answer.results[3][1] == frames.DUPLICATE
    stored = stored_records(device)
    assert [(r.msg_id, r.parts) for r in stored] == [
        (b"a", (b"1",)), (b"b", (b"2",)), (b"c", (b"3",)), (b"h", (b"8",)), (b"i", (b"9",)),
        (b"j", (b"10",))]
    assert [r.headers for r in stored] == [tuple(TOPIC)] * 2 + [
        (*TOPIC, b"DEDUP-ID:x"), (b"TOPIC:audit",), (b"TOPIC:audit",), tuple(TOPIC)]
    orders, audit = topics.topic("orders", 1), topics.topic("audit", 1)
    assert (orders.received, audit.received) == (4, 2)
    seqs = [keyspace.own_seq(key) for key, _ in device.node.store.scan(keyspace.OWN_PREFIX)]
    logged = [found for topic in (orders, audit)
              for found in stored_log(device.node.store, topic.id)]
    assert sorted(logged) == [(seq, b"") for seq in seqs]
    assert (orders.groups["g"].backlog, audit.groups["g"].backlog) == (4, 2)
    counters = device.node.counters
    assert (counters.received, counters.stored, counters.acks_ok, counters.rejected) == \
        (10, 7, 8, 2)
    assert device.node.store.messages == 6  # and the scheduled one kept apart


def test_a_run_not_written_is_refused_member_by_member_and_its_seqs_skipped(device,
                                                                             producer):
    failing = FailNext()
    device.node.store.register(failing)
    failing.armed = True
    producer.send_multipart(batches.encode_batch(
        b"lost", [entry(b"%d" % n, b"body") for n in range(4)]))
    answer = answer_of(device, producer)
    assert [result for result in answer.results] == \
        [(False, b"not stored: the disk is full")] * 4
    assert device.node.store.messages == 0 and stored_records(device) == []
    seq = device.node.store.next_seq
    producer.send_multipart(batches.encode_batch(
        b"kept", [entry(b"%d" % n, b"body") for n in range(4)]))
    assert all(ok for ok, _ in answer_of(device, producer).results)
    assert [r.msg_id for r in stored_records(device)] == [b"%d" % n for n in range(4)]
    assert device.node.store.next_seq == seq + 4
    assert device.node.counters.store_failures == 4


def test_a_forbidden_run_is_refused_and_counted_member_by_member(open_device, open_socket,
                                                                  tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[default]\nproduce = ["open.*"]\n')
    device = open_device("--authorization", str(rules))
    socket = open_socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(device.bound()["receive"])
    topics = [b"open.a", b"open.a", b"closed", b"closed", b"closed", b"open.a"]
    socket.send_multipart(batches.encode_batch(b"B", [
        entry(b"%d" % n, b"body", [b"TOPIC:" + topic]) for n, topic in enumerate(topics)]))
    answer = answer_of(device, socket)
    refused = (False, b"FORBIDDEN produce closed" + NOT_YOURS)
    assert answer.results == ((True, b""),) * 2 + (refused,) * 3 + ((True, b""),)
    assert device.node.authorization.figures()["forbidden"]["produce"] == 3
    assert device.node.counters.rejected == 3 and device.node.store.messages == 3
