"""Bad input gets a clear answer, the node keeps running and nothing stored is lost.

The nodes run in this process (tests.support.inproc, on loopback ports of their own),
but the one whose writes a file-size limit makes fail: a daemon, SIGKILLed after."""

from __future__ import annotations

import resource

import pytest
import zmq

from pzq.admin.topic_admin import TopicAdmin
from pzq.client import Producer, request_monitor
from pzq.protocol.message_keys import message_key, parse_message_key
from tests.support.harness import consume_all, produce_until_refused, run_pzq

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def node(inproc_node):
    return inproc_node


def raw_produce(node, context, frames: list[bytes]) -> list[bytes]:
    dealer = context.socket(zmq.DEALER)
    dealer.connect(node.receive_dsn)
    dealer.send_multipart(frames)
    assert dealer.poll(10000), "no ACK for a malformed message"
    reply = dealer.recv_multipart()
    dealer.close(0)
    return reply


@pytest.fixture
def stored_one(node, producer):
    """One good message stored before the bad input arrives; it must survive."""
    assert producer.produce([b"keep me"]).ok
    return b"keep me"


@pytest.mark.parametrize("frames, reason", [
    ([b"id-1", b"no delimiter"], b"missing empty delimiter frame"),
    ([b"id-2", b""], b"no body part"),
    ([b"id-3", b"REPLICA:forged", b"", b"body"], b"reserved"),
    ([b"id-4", b"ORIGIN:abcd1234", b"", b"body"], b"reserved"),
    ([b"id-5", b"DELIVERY:7", b"", b"body"], b"reserved"),
    ([b"id-6", b"not a header", b"", b"body"], b"is not NAME:value"),
    ([b""], b"missing empty delimiter frame"),
])
def test_malformed_producer_message_gets_ack_0(node, context, stored_one, consumer,
                                               frames, reason):
    msg_id, status, empty, message = raw_produce(node, context, frames)
    assert (msg_id, status, empty) == (frames[0], b"0", b"")
    assert reason in message
    figures = node.figures()
    assert figures["messages"] == 1 and figures["rejected"] == 1
    delivered = consumer.receive(10)
    assert delivered.parts == (stored_one,)


def test_body_over_max_message_size_is_refused(start_inproc_node, context):
    node = start_inproc_node("--max-message-size", "1000", consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"x" * 600, b"y" * 400]).ok
        ack = producer.produce([b"x" * 600, b"y" * 401])
        assert not ack.ok
        assert b"1001 bytes exceeds the limit of 1000" in ack.status_message
    assert node.figures()["messages"] == 1


@pytest.mark.parametrize("frames", [
    [b"only-one-frame"],
    [b"a", b"1", b"extra"],
    [b"", b"1"],
    [b"a", b""],
    [b"not-a-key", b"1"],
    [b"deadbeef-00000000000000zz", b"1"],
    [b"deadbeef-0000000000000000", b"1"],  # well formed, another node's key
])
def test_malformed_or_unknown_consumer_ack_is_ignored(node, stored_one, open_socket, frames):
    router = open_socket(zmq.ROUTER)
    router.connect(node.send_dsn)
    assert router.poll(10000)
    peer, key, *_, body = router.recv_multipart()
    router.send_multipart([peer, *frames])
    figures = node.wait_figures(
        lambda f: f["bad_consumer_acks"] + f["unknown_acks"] == 1, message="ack counted")
    assert figures["messages"] == 1 and figures["acked"] == 0
    router.send_multipart([peer, key, b"1"])  # the real ACK still works
    node.wait_figures(lambda f: f["messages"] == 0, message="real ack applied")


def six_delivered(node, producer, open_socket):
    """Six messages produced and delivered on --send-dsn to one consumer: its socket,
    the node's routing id there, and the messages' keys."""
    for n in range(6):
        assert producer.produce([b"m%d" % n]).ok
    router = open_socket(zmq.ROUTER)
    router.connect(node.send_dsn)
    keys = []
    while len(keys) < 6:
        assert router.poll(10000), "not every message was delivered"
        peer, key, *_ = router.recv_multipart()
        keys.append(key)
    return router, peer, keys


def test_a_bad_key_among_many_acks_costs_only_itself(node, producer, open_socket):
    """ACKs that arrive together are applied together; one that is no message key in
    their middle is counted and the others before and after it still apply."""
    router, peer, keys = six_delivered(node, producer, open_socket)
    for key in [*keys[:2], b"not-a-key", *keys[2:]]:
        router.send_multipart([peer, key, b"1"])
    figures = node.wait_figures(lambda f: f["messages"] == 0, message="acks applied")
    assert figures["bad_consumer_acks"] == 1 and figures["acked"] == 6
    assert figures["unknown_acks"] == 0


def test_a_nack_among_acks_read_together_gives_only_its_message_back(node, producer,
                                                                     open_socket):
    """ACKs read in one wake go in one answer only when every one is an ACK: a NACK
    among them gives its message back and the others are done."""
    router, peer, keys = six_delivered(node, producer, open_socket)
    for key in keys:
        router.send_multipart([peer, key, b"0" if key == keys[3] else b"1"])
    assert router.poll(10000), "the NACKed message was not delivered again"
    assert router.recv_multipart()[1] == keys[3]
    figures = node.wait_figures(lambda f: f["acked"] == 5, message="acks applied")
    assert figures["messages"] == 1 and figures["nacked"] == 1


def test_ack_for_unknown_sequence_of_this_node(node, stored_one, consumer):
    message = consumer.receive(10)
    node_id, seq = parse_message_key(message.key)
    consumer._socket.send_multipart([message.peer, message_key(node_id, seq + 99),
                                     b"1"])
    node.wait_figures(lambda f: f["unknown_acks"] == 1, message="unknown ack counted")
    message.ack()
    node.wait_figures(lambda f: f["messages"] == 0, message="real ack applied")


@pytest.mark.parametrize("command", [b"FROBNICATE", b""])
def test_unknown_monitor_command_gets_an_error_reply(node, command):
    reply = request_monitor(node.monitor_dsn, command.decode())
    assert reply.startswith(b"ERROR: unknown command")
    assert b"MONITOR" in reply
    assert request_monitor(node.monitor_dsn, "PING") == b"PONG"


def test_monitor_answers_a_req_socket(node, open_socket):
    req = open_socket(zmq.REQ)
    req.connect(node.monitor_dsn)
    req.send(b"MONITOR")
    assert req.poll(10000)
    text = req.recv()
    assert text.startswith(b"messages: 0\nmessages_inflight: 0\n")


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_locked_database_is_a_clear_start_error(node):
    result = run_pzq(["--database", str(node.database), "--receive-dsn", "tcp://127.0.0.1:*",
                      "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert result.returncode == 3
    assert "in use by another process" in one_line_error(result)
    assert node.running


@pytest.mark.parametrize("database", ["a-file", "a-file/db"])
def test_unusable_database_directory_is_a_clear_start_error(tmp_path, database):
    (tmp_path / "a-file").write_text("not a directory")
    result = run_pzq(["--database", str(tmp_path / database), "--receive-dsn",
                      "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
                      "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert result.returncode == 3
    assert "database" in one_line_error(result)


def limit_file_size() -> None:
    # LevelDB's log file hits this after a few hundred kilobytes: a full disk.
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


def test_store_write_error_refuses_and_loses_nothing(start_node, context, tmp_path):
    node = start_node(preexec_fn=limit_file_size)
    acked, refused = produce_until_refused(node, context, 0, 2000)
    assert refused, "the file size limit never made a write fail"
    assert all(message.startswith(b"not stored: store write failed") for message in refused)
    assert request_monitor(node.monitor_dsn, "PING") == b"PONG"
    assert node.figures()["store_failures"] == len(refused)
    node.kill()
    node.preexec_fn = None
    node.restart()
    consume_all(node, context, acked)


@pytest.mark.parametrize("command, answer", [
    ("DEAD x", "ERROR: DEAD x: give DEAD [limit], a limit a whole number 0 or more"),
    ("DEAD -1", "ERROR: DEAD -1: give DEAD [limit], a limit a whole number 0 or more"),
    ("DEAD 5 6", "ERROR: DEAD 5 6: give DEAD [limit], a limit a whole number 0 or more"),
    ("DEAD " + "9" * 30, "dead_letters: 0"),  # more than a list holds: every one
    ("DEAD 0", "dead_letters: 0"),
])
def test_a_bad_dead_letter_limit_is_a_clear_error(node, command, answer):
    assert request_monitor(node.monitor_dsn, command, timeout=10).decode().strip() == answer


LONG = b"9" * 5000  # int() of more than 4 300 digits raises ValueError


@pytest.mark.parametrize("request_frames, error", [
    ([b"CONSUME", b"orders", b"g", b"5", b"START:" + LONG],
     b"START:" + LONG[:40] + b" is not earliest, latest or \xc2\xb5s since the epoch"),
    ([b"CONSUME", b"orders", b"g", b"5", "START:²".encode()],
     "START:² is not earliest, latest or µs since the epoch".encode()),
    ([b"CONSUME", b"orders", b"g", LONG], b"CONSUME window '" + LONG[:20]
     + b"' is not a number from 1 to 100000"),
    ([b"CONSUME", b"orders", b"g", "²".encode()],
     "CONSUME window '²' is not a number from 1 to 100000".encode()),
])
def test_a_consume_with_numbers_python_cannot_read_is_refused(start_inproc_node, context,
                                                             request_frames, error):
    """Each of these ended the node's loop (ValueError from int()): any client could
    stop a node with one message."""
    node = start_inproc_node(tcp=True)
    assert node_produce(node, context, [b"TOPIC:orders"]) == [b"kept", b"1", b""]
    dealer = context.socket(zmq.DEALER)
    dealer.connect(node.consume_dsn)
    dealer.send_multipart(request_frames)
    assert dealer.poll(10000), "no answer: the node's loop may have ended"
    assert dealer.recv_multipart() == [b"ERROR", error]
    dealer.send_multipart([b"CONSUME", b"orders", b"g", b"5", b"PROTOCOL:" + LONG])
    assert dealer.poll(10000)  # a protocol above the node's own gets the node's own
    assert dealer.recv_multipart() == [b"CONSUMING", b"orders", b"g", b"5", b"1000",
                                       b"PROTOCOL:2"]
    assert dealer.poll(10000)
    delivered = dealer.recv_multipart()
    assert delivered[0] == b"BATCH"
    key = delivered[5][1:1 + delivered[5][0]]  # the first entry's key
    dealer.send_multipart([b"NACK", b"DELAY:" + LONG, key])
    assert dealer.poll(10000)
    refused = dealer.recv_multipart()
    assert refused[0] == b"ERROR" and b"is not DELAY:<milliseconds" in refused[1], refused
    dealer.close(0)
    assert request_monitor(node.monitor_dsn, "PING", timeout=10) == b"PONG"


def node_produce(node, context, headers: list[bytes]) -> list[bytes]:
    return raw_produce(node, context, [b"kept", *headers, b"", b"body"])


def test_a_batch_count_python_cannot_read_is_refused(node, context, stored_one, consumer):
    """BATCH:<5000 digits> ended the node's loop (ValueError from int())."""
    reply = raw_produce(node, context, [b"batch-1", b"BATCH:" + LONG, b"", b"x"])
    assert reply == [b"batch-1", b"0", b"", b"a batch is batch id, BATCH:<1 to 10000>, an "
                     b"empty frame and one frame of entries"]
    assert consumer.receive(10).parts == (stored_one,)


@pytest.mark.parametrize("command, answer", [
    ("DECLARE TOPIC t max_messages=" + "9" * 5000,
     "ERROR: max_messages=99999999999999999999 is not a whole number 0 or more (at most "
     "19 digits)"),
    ("DECLARE TOPIC t max_messages=²", "ERROR: max_messages=² is not a whole number 0 or "
                                       "more"),
])
def test_a_monitor_number_python_cannot_read_is_a_clear_error(node, command, answer):
    """They answered int()'s own words (Exceeds the limit (4300 digits) ..., invalid
    literal for int() ...)."""
    assert request_monitor(node.monitor_dsn, command, timeout=10).decode() == answer


@pytest.mark.parametrize("command, shown", [
    ("DECLARE TOPIC t dedup_window=" + "9" * 400, "9" * 40 + "..."),
    ("DECLARE GROUP default g ack_timeout=" + "9" * 400 + "s", "9" * 40 + "..."),
    ("DECLARE TOPIC t max_age=٣s", "٣s"),  # a digit, but not an ASCII one
])
def test_a_duration_float_cannot_hold_is_a_clear_error(node, stored_one, command, shown):
    """float() made 400 digits infinity, which round() refused with an OverflowError
    that ended the node's loop."""
    answer = request_monitor(node.monitor_dsn, command, timeout=10).decode()
    assert answer == f"ERROR: {shown} is not a duration: give microseconds (5000000) or a " \
                     "number with a unit: 250ms, 5s, 2m, 1h, 2d"
    assert request_monitor(node.monitor_dsn, "PING", timeout=10) == b"PONG"


@pytest.mark.parametrize("command", ["STATS extra", "ROUTES x", "MONITOR 1", "PING pong",
                                     "TOPICS orders"])
def test_a_word_after_a_verb_that_takes_none_is_refused(node, command):
    """They answered as if the word were not there: a typo went unnoticed."""
    verb, word = command.split()
    answer = request_monitor(node.monitor_dsn, command, timeout=10).decode()
    assert answer == f"ERROR: {verb} {word}: give {verb} alone, no words after it"
    assert not request_monitor(node.monitor_dsn, verb, timeout=10).startswith(b"ERROR")


def test_the_last_microsecond_of_9999_is_shown_by_topics(node, context):
    """A message due at the last µs of 9999 (NOT-BEFORE takes it): TOPICS made a float
    of its seconds, rounded to the year 10000, and answered ERROR while it was stored."""
    assert node_produce(node, context, [b"TOPIC:t", b"NOT-BEFORE:253402300799999999"]) \
        == [b"kept", b"1", b""]
    answer = request_monitor(node.monitor_dsn, "TOPICS", timeout=10).decode()
    assert " scheduled=1 next_due=9999-12-31T23:59:59.999+00:00" in answer, answer


def test_a_verb_that_fails_unforeseen_is_an_error_answer_and_the_node_goes_on(
        node, context, stored_one, consumer, monkeypatch):
    """A verb's failure its own checks did not foresee (here one injected into TOPICS of
    the node running in this process) ended the node's loop. Any verb's unforeseen
    failure is now an answer, and a traceback in the log."""
    def unforeseen(admin: TopicAdmin, topic: str) -> str:
        raise RuntimeError(f"unforeseen for {topic}")

    monkeypatch.setattr(TopicAdmin, "_scheduled_text", unforeseen)
    answer = request_monitor(node.monitor_dsn, "TOPICS", timeout=10).decode()
    assert answer == "ERROR: TOPICS failed (RuntimeError: unforeseen for default); the " \
        "node goes on, its log has the details"
    assert request_monitor(node.monitor_dsn, "PING", timeout=10) == b"PONG"
    said = node.event("monitor_verb_failed")
    assert said is not None and said["level"] == "error" and said["verb"] == "TOPICS"
    assert said["error"].startswith("RuntimeError: ") and "Traceback" in said["exception"]
    assert consumer.receive(10).parts == (stored_one,)  # the node serves on


@pytest.mark.parametrize("frames, reason", [
    ([b"i" * 256, b"", b"body"], b"message id of 256 bytes exceeds the limit of 255 bytes"),
    ([b"i" * (10 << 20), b"", b"body"],
     b"message id of 10485760 bytes exceeds the limit of 255 bytes"),
    ([b"id-7", b"X-BIG:" + b"h" * (70 << 10), b"", b"b"],
     b"header frames of 71686 bytes exceed the limit of 65536 bytes together"),
    ([b"id-8", b"TAG:" + b"t" * 256, b"", b"body"],
     b"TAG of 256 bytes exceeds the limit of 255 bytes"),
    ([b"id-9", b"TAG:" + b"t" * (1 << 20), b"", b"body"],
     b"header frames of 1048580 bytes exceed the limit of 65536 bytes together"),
])
def test_a_message_id_header_or_tag_over_its_limit_is_refused(node, context, stored_one,
                                                              consumer, frames, reason):
    """--max-message-size is the body's: a 10 MiB message id and a 10 MiB header frame
    were stored, and a 1 MiB TAG, which is part of store keys, too."""
    msg_id, status, empty, message = raw_produce(node, context, frames)
    assert (msg_id, status, empty, message) == (frames[0], b"0", b"", reason)
    assert node.figures()["messages"] == 1
    assert consumer.receive(10).parts == (stored_one,)


def test_at_their_limits_a_message_id_header_and_tag_are_stored(node, context):
    tag = b"TAG:" + b"t" * 255
    frames = [b"i" * 255, tag, b"X-BIG:" + b"h" * (65_536 - len(tag) - 6), b"", b"body"]
    assert raw_produce(node, context, frames) == [b"i" * 255, b"1", b""]


def test_a_run_of_messages_sent_alone_refuses_only_its_long_message_id(node, context):
    """Messages of one shape read together are stored as a run, each id unread but
    the first's: the long one among them is refused on its own."""
    dealer = context.socket(zmq.DEALER)
    dealer.connect(node.receive_dsn)
    ids = [b"a", b"b", b"c" * 300, b"d", b"e"]
    for msg_id in ids:
        dealer.send_multipart([msg_id, b"", b"body"])
    answers = {}
    while len(answers) < len(ids):
        assert dealer.poll(10000), answers
        msg_id, status, _, *message = dealer.recv_multipart()
        answers[msg_id] = status, tuple(message)
    dealer.close(0)
    assert answers.pop(b"c" * 300) == (b"0", (b"message id of 300 bytes exceeds the limit "
                                              b"of 255 bytes",))
    assert set(answers.values()) == {(b"1", ())}
    assert node.figures()["messages"] == 4


def test_a_batch_refuses_a_long_message_id_or_batch_id(node, context):
    from pzq.protocol import produce_batches as batches
    dealer = context.socket(zmq.DEALER)
    dealer.connect(node.receive_dsn)
    entries = [batches.encode_entry(msg_id, [], [b"body"]) for msg_id in (b"a", b"b" * 256)]
    dealer.send_multipart(batches.encode_batch(b"batch-1", entries))
    assert dealer.poll(10000)
    ack = batches.decode_batch_ack(dealer.recv_multipart())
    assert ack.results == ((True, b""), (False, b"message id of 256 bytes exceeds the limit "
                                                b"of 255 bytes"))
    same = [batches.encode_entry(b"c" * 256, [], [b"x"])] * 3  # (one shape: read in C)
    dealer.send_multipart(batches.encode_batch(b"batch-2", same))
    assert dealer.poll(10000)
    assert {result for result in batches.decode_batch_ack(dealer.recv_multipart()).results} \
        == {(False, b"message id of 256 bytes exceeds the limit of 255 bytes")}
    dealer.send_multipart(batches.encode_batch(b"B" * 256, entries[:1]))
    assert dealer.poll(10000)
    assert dealer.recv_multipart() == [b"B" * 256, b"0", b"", b"batch id of 256 bytes "
                                       b"exceeds the limit of 255 bytes"]
    dealer.close(0)
    assert node.figures()["messages"] == 1
