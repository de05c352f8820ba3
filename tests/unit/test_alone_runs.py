"""Messages sent alone (the original frames) taken as runs of one shape
(pzq.protocol.alone_runs, pzq.node.intake) and their ACKs sent by map
(pzq.node.outbox, pzq.zmqio.send_messages): the runs' edges, a node's loop on
inproc endpoints driven wake by wake for what the store and the producer see, and
ACKs that full pipes and gone producers refuse."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import zmq

from pzq.counters import Counters
from pzq.node.device import Device
from pzq.node.outbox import ProducerAcks
from pzq.protocol import alone_runs, frames
from pzq.protocol import produce_batches as batches
from pzq.store import keyspace, record
from pzq.zmqio import send_messages
from tests.support.devices import wake
from tests.support.stored import stored_log

pytestmark = pytest.mark.timeout(30)
Sockets = Callable[[int], zmq.Socket]
TOPIC = b"TOPIC:orders"


def sent(msg_id: bytes, parts: list[bytes], headers: tuple[bytes, ...] = ()) -> list[bytes]:
    """A message as the node's ROUTER receives it."""
    return [b"peer", *frames.encode_produce(msg_id, parts, headers)]


# -- runs of one shape ---------------------------------------------------------------

@pytest.mark.parametrize("headers, parts", [
    ((), [b"body"]), ((TOPIC,), [b""]), ((TOPIC, b"TAG:x"), [b"a", b"", b"ccc"])])
def test_a_runs_records_are_those_of_its_messages_encoded_one_by_one(headers, parts):
    run = [sent(msg_id, [part + msg_id for part in parts], headers)
           for msg_id in (b"1", b"", b"three")]
    at = 3 + len(headers)
    assert alone_runs.records(run, at, headers, record.fixed(42)) == [
        record.encode(raw[1], headers, tuple(raw[at:]), 42) for raw in run]
    assert alone_runs.body_sizes(run, at) == [sum(map(len, raw[at:])) for raw in run]


def test_a_run_ends_at_the_first_message_of_another_shape():
    plain = [sent(b"%d" % n, [b"x"], (TOPIC,)) for n in range(3)]
    others = [sent(b"o", [b"x", b"y"], (TOPIC,)),  # more frames
              sent(b"o", [b"x"], (b"TOPIC:audit",)),  # another header
              sent(b"o", [b"", b"x"]),  # as many frames, the empty one before the header's
              [b"peer", b"o", TOPIC, b"x"]]  # no empty frame
    for other in others:
        raws = [*plain, other, *plain]
        assert alone_runs.run_length(raws, 0, (TOPIC,)) == 3
        assert alone_runs.run_length(raws, 4, (TOPIC,)) == 3
    assert alone_runs.run_length(plain, 2, (TOPIC,)) == 1


# -- a node's loop -------------------------------------------------------------------

def ids(letters: bytes) -> list[bytes]:
    return [bytes([letter]) for letter in letters]


def acks_of(socket: zmq.Socket, count: int) -> list[list[bytes]]:
    """``count`` ACKs, and no more."""
    answers = []
    while len(answers) < count:
        assert socket.poll(1000), f"{len(answers)} of {count} ACKs"
        answers.append(socket.recv_multipart())
    assert not socket.poll(0)
    return answers


def test_a_wake_of_messages_sent_alone_stores_runs_and_answers_each_as_alone(
        open_device: Callable[..., Device], open_socket: Sockets):
    """Runs stored together beside messages that need a look at each (a DEDUP-ID and
    its repeat, a due time, a reserved header, a body too big, no empty frame, an ask
    for produce batches): each answered with the original's frames, the records and
    the topic's log those of messages stored one by one, the figures counted."""
    device = open_device("--max-message-size", "100")
    topics, store = device.node.topics, device.node.store
    batch = store.begin()
    for name in ("orders", "audit"):  # read by a group: its log is kept
        topics.add_group(topics.topic(name, 1), "g", 0, "", 1)
    store.commit(batch)
    producer = open_socket(zmq.DEALER)
    producer.setsockopt(zmq.LINGER, 0)
    producer.connect(device.bound()["receive"])
    messages = [(b"a", [b"1"], (TOPIC,)), (b"b", [b"2"], (TOPIC,)),
                (b"c", [b"x" * 101], (TOPIC,)), (b"d", [b"4"], (TOPIC,)),
                (b"e", [b"5", b"55"], (TOPIC,)), (b"f", [b"6", b"66"], (TOPIC,)),
                (b"g", [b"7"], (TOPIC, b"DEDUP-ID:x")), (b"h", [b"8"], (TOPIC, b"DEDUP-ID:x")),
                (b"i", [b"9"], (TOPIC, b"DELAY:60000")), (b"j", [b"10"], (TOPIC, b"REPLICA:x")),
                (b"k", [b"11"], (b"TOPIC:audit",)), (b"l", [b"12"], (b"TOPIC:audit",)),
                (b"m", [b"13"], (TOPIC, batches.PROTOCOL_HEADER)), (b"n", [b"14"], (TOPIC,))]
    for msg_id, parts, headers in messages:
        producer.send_multipart(frames.encode_produce(msg_id, parts, headers))
        if msg_id == b"c":
            producer.send_multipart([b"bad", TOPIC, b"no empty frame"])
    wake(device, 1000)  # all of them in one wake, their ACKs after the write
    answers = acks_of(producer, 15)
    assert answers[:3] == [  # refused at once, before the write
        [b"c", b"0", b"", b"message body of 101 bytes exceeds the limit of 100 bytes"],
        [b"bad", b"0", b"", b"missing empty delimiter frame before the body"],
        [b"j", b"0", b"", b"header REPLICA is reserved for the device and its cluster"]]
    stored_acks = answers[3:]
    expected = {msg_id: [msg_id, b"1", b""] for msg_id in ids(b"abdefgiklmn")}
    expected[b"h"] = [b"h", b"1", b"", frames.DUPLICATE]
    expected[b"m"] = [b"m", b"1", batches.PROTOCOL_HEADER, b""]
    assert sorted(stored_acks) == sorted(expected.values())
    in_order = ids(b"abdefkln")  # (each answered on its own, as they came)
    assert [ack[0] for ack in stored_acks if ack[0] in in_order] == in_order
    stored = [record.decode(value) for _, value in store.scan(keyspace.OWN_PREFIX)]
    written = {(msg_id, tuple(parts), tuple(h for h in headers if h != batches.PROTOCOL_HEADER))
               for msg_id, parts, headers in messages if msg_id in ids(b"abdefgklmn")}
    assert {(r.msg_id, r.parts, r.headers) for r in stored} == written
    assert len({r.stored_us for r in stored}) == 1 and len(stored) == 10
    orders, audit = topics.topic("orders", 1), topics.topic("audit", 1)
    assert (orders.received, audit.received) == (8, 2)
    seqs = [keyspace.own_seq(key) for key, _ in store.scan(keyspace.OWN_PREFIX)]
    logged = [seq for topic in (orders, audit) for seq, _ in stored_log(store, topic.id)]
    assert sorted(logged) == seqs
    assert (orders.groups["g"].backlog, audit.groups["g"].backlog) == (8, 2)
    counters = device.node.counters
    assert (counters.received, counters.stored, counters.acks_ok, counters.rejected,
            counters.duplicates, counters.producer_acks_sent) == (15, 11, 12, 3, 1, 15)
    assert store.messages == 10  # and the scheduled one kept apart


# -- ACKs sent by map ----------------------------------------------------------------

def test_acks_a_full_pipe_refuses_wait_and_a_gone_producers_are_dropped(open_socket: Sockets):
    """The ACKs after a refused one go; the refused wait for room, each sent once."""
    router = open_socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.setsockopt(zmq.SNDHWM, 2)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("inproc://acks")
    slow, quick = open_socket(zmq.DEALER), open_socket(zmq.DEALER)
    for name, socket, room in ((b"slow", slow, 2), (b"quick", quick, 100)):
        socket.setsockopt(zmq.IDENTITY, name)
        socket.setsockopt(zmq.RCVHWM, room)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect("inproc://acks")
    counters = Counters()
    acks = ProducerAcks(router, counters)
    many = [b"%d" % n for n in range(20)]
    acks.owe_ok([b"slow"] * 10 + [b"gone"] + [b"quick"] * 10 + [b"slow"] * 10,
                many[:10] + [b"x"] + many[:10] + many[10:])
    acks.flush()
    assert counters.producer_acks_dropped == 1
    assert acks_of(quick, 10) == [[msg_id, b"1", b""] for msg_id in many[:10]]
    went = counters.producer_acks_sent - 10
    assert 0 < went < 20 and len(acks) == 20 - went
    received: list[list[bytes]] = []
    while len(received) < 20:
        while slow.poll(0):
            received.append(slow.recv_multipart())
        acks.flush()
    assert sorted(received) == sorted([msg_id, b"1", b""] for msg_id in many)
    assert (counters.producer_acks_sent, counters.acks_ok, len(acks)) == (30, 31, 0)
    acks.owe_ok([b"gone"], [b"y"])  # one alone: dropped as well
    acks.flush()
    assert (counters.producer_acks_dropped, len(acks)) == (2, 0)
    acks.owe_ok([b"slow"] * 5, many[:5])
    flush_until(acks, 1)  # four fill the pipe: the last one waits, alone
    acks.flush()
    assert len(acks) == 1
    went = acks_of(slow, 4)
    flush_until(acks, 0)
    assert sorted(went + acks_of(slow, 1)) == sorted([msg_id, b"1", b""] for msg_id in many[:5])


def flush_until(acks: ProducerAcks, left: int) -> None:
    """Flush until ``left`` ACKs wait (the ROUTER learns of room its peer's reads made
    as it sends, not at once)."""
    deadline = time.monotonic() + 5
    acks.flush()
    while len(acks) != left:
        assert time.monotonic() < deadline, f"{len(acks)} ACKs wait, not {left}"
        acks.flush()


def test_send_messages_says_where_a_refusal_stopped_it(open_socket: Sockets):
    router = open_socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.bind("inproc://sends")
    peer = open_socket(zmq.DEALER)
    peer.setsockopt(zmq.IDENTITY, b"p")
    peer.connect("inproc://sends")
    messages = [[b"p", b"1"], [b"p", b"2", b"22"], [b"nobody", b"3"], [b"p", b"4"]]
    end, error = send_messages(router, messages, 0)
    assert end == 2 and error is not None and error.errno == zmq.EHOSTUNREACH
    assert send_messages(router, messages, 3) == (4, None)
    assert [peer.recv_multipart() for _ in range(3)] == [[b"1"], [b"2", b"22"], [b"4"]]
