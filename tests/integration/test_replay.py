"""A named group replays a range of its topic's archive (REPLAY GROUP, REPLAYS, REPLAY
CANCEL) on real nodes in this process (tests.support.inproc, loopback ports of their
own). What needs a daemon (a SIGKILL, pzq-ctl, shards) is in test_replay_daemon.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import zmq

from pzq.client import Consumer, GroupConsumer, Producer, request_monitor
from tests.integration.test_groups import FAST
from tests.support.harness import wait_until
from tests.support.inproc import AnyNode

pytestmark = pytest.mark.timeout(90)

ARCHIVE = ("--flush-interval", "50", "--delivery-headers", "--replay-rate", "100000")


def ask(node: AnyNode, command: str) -> str:
    return request_monitor(node.monitor_dsn, command, timeout=10).decode()


def archived_node(start_inproc_node, tmp_path, *options: str) -> AnyNode:
    """A node archiving to ``tmp_path/archive``, its topic orders with the group g."""
    node = start_inproc_node(*FAST, *ARCHIVE, "--archive-dir", str(tmp_path / "archive"),
                             *options, tcp=True)
    assert ask(node, "DECLARE TOPIC orders").startswith("topic orders")
    assert ask(node, "DECLARE GROUP orders g").startswith("group g")
    return node


def produce(node: AnyNode, context: zmq.Context, bodies: list[bytes], tag: str = "eu") -> None:
    with Producer(node.receive_dsn, window=100, context=context) as producer:
        for body in bodies:
            producer.send([body, b"second part"], topic="orders", tag=tag)
        assert all(ack.ok for ack in producer.flush(15))


def consume(node: AnyNode, context: zmq.Context, count: int, group: str = "g",
            ack: bool = True) -> list:
    """``count`` deliveries of the group, each ACKed (with ``ack``); none more within
    a short wait."""
    got = []
    with GroupConsumer(node.consume_dsn, "orders", group, window=200, context=context,
                       confirm=True) as g:
        while len(got) < count:
            batch = g.receive_many(200, timeout=10)
            assert batch, f"only {len(got)} of {count} delivered"
            got += batch
            if ack:
                g.ack_confirmed(batch)
        assert g.receive(0.3) is None
    return got


def archived_and_gone(node: AnyNode, context: zmq.Context, bodies: list[bytes]) -> None:
    """``bodies`` produced, consumed and ACKed by g: archived, and gone from the store."""
    produce(node, context, bodies)
    consume(node, context, len(bodies))
    node.wait_stats(lambda s: s["archive"]["archived"] >= len(bodies) and s["messages"] == 0)


def replays(node: AnyNode) -> list[dict[str, str]]:
    answer = ask(node, "REPLAYS")
    if answer == "no replays\n":
        return []
    return [dict(word.split("=", 1) for word in line.split()[1:] if "=" in word)
            | {"id": line.split()[0]} for line in answer.splitlines()]


def test_a_thousand_acked_come_again_in_archive_order_as_produced(start_inproc_node, context,
                                                                  tmp_path):
    node = archived_node(start_inproc_node, tmp_path)
    bodies = [b"m%04d" % n for n in range(1000)]
    archived_and_gone(node, context, bodies)
    assert ask(node, "DECLARE GROUP orders other start=earliest").startswith("group other")
    answer = ask(node, "REPLAY GROUP orders g from=earliest")
    assert answer.startswith("replay ")
    assert ": 1000 messages from archive byte offset 0 to " in answer
    replay_id = answer.split()[1]
    with Consumer(node.send_dsn, context=context) as plain, \
            GroupConsumer(node.consume_dsn, "orders", "other", context=context) as other:
        again = consume(node, context, 1000)
        assert plain.receive(0.2) is None and other.receive(0.2) is None  # g's alone
    assert [message.parts for message in again] == [(body, b"second part") for body in bodies]
    first = again[0]
    assert first.key.startswith(replay_id.encode() + b"-")
    assert first.headers["TAG"] == "eu" and first.headers["TOPIC"] == "orders"
    assert first.headers["DELIVERY"] == "1"
    wait_until(lambda: replays(node)[0]["state"] == "done", 10, message="the replay done")
    (done,) = replays(node)
    assert (done["read"], done["acked"], done["left"]) == ("1000", "1000", "0")
    stats = node.stats()
    assert stats["archive"]["archived"] == 1000 and stats["messages"] == 0  # not archived again


def test_a_time_range_replays_what_was_stored_within_it(start_inproc_node, context, tmp_path):
    node = archived_node(start_inproc_node, tmp_path)
    archived_and_gone(node, context, [b"before"])
    since_us = time.time_ns() // 1000
    archived_and_gone(node, context, [b"within-1", b"within-2"])
    until = datetime.now(UTC)
    time.sleep(0.002)  # a store time after ``until``, to the µs
    archived_and_gone(node, context, [b"after"])
    answer = ask(node, f"REPLAY GROUP orders g from={since_us} to={until.isoformat()}")
    assert ": 2 messages from archive byte offset " in answer, answer
    assert [m.parts[0] for m in consume(node, context, 2)] == [b"within-1", b"within-2"]


def test_the_groups_ordinary_deliveries_nack_reject_and_dead_letters(start_inproc_node, context,
                                                                     tmp_path):
    node = archived_node(start_inproc_node, tmp_path)
    archived_and_gone(node, context, [b"one", b"two", b"three"])
    assert ask(node, "DECLARE GROUP orders g max_deliveries=2").startswith("group g")
    ask(node, "REPLAY GROUP orders g from=earliest")
    with GroupConsumer(node.consume_dsn, "orders", "g", window=10, context=context,
                       confirm=True) as g:
        one, two, three = (g.receive(10) for _ in range(3))
        assert [one.parts[0], two.parts[0], three.parts[0]] == [b"one", b"two", b"three"]
        pending = ask(node, "PENDING GROUP orders g").splitlines()
        assert pending[0] == "group g of topic orders: 3 out, 0 waiting"
        assert [line.split()[0] for line in pending[1:]] == [
            m.key.decode() for m in (one, two, three)]
        g.working(one)  # its deadline starts again, as a live delivery's
        g.reject(two)  # to the dead letters
        g.nack(three, delay=0.2)
        g.nack(one)
        again = g.receive(10)
        assert again.key == one.key and again.headers["DELIVERY"] == "2"
        g.nack(again)  # its second delivery: given up (max_deliveries=2)
        later = g.receive(10)
        assert later.key == three.key and later.headers["DELIVERY"] == "2"
        g.ack_confirmed([later])
        assert g.receive(0.3) is None
    node.wait_stats(lambda s: s["dead_letters"] == 2)
    dead = ask(node, "DEAD").splitlines()[1:]  # two, given up at once; one, after 2
    assert [line.split()[2] for line in dead] == ["deliveries=1", "deliveries=2"]
    wait_until(lambda: replays(node)[0]["state"] == "done", 10, message="the replay done")
    assert replays(node)[0]["dead"] == "2"
    assert node.stats()["archive"]["archived"] == 3  # nothing archived a second time


def test_cancel_deletes_what_is_left_and_the_consumers_credit_comes_back(start_inproc_node,
                                                                        context, tmp_path):
    node = archived_node(start_inproc_node, tmp_path)
    archived_and_gone(node, context, [b"r%d" % n for n in range(50)])
    replay_id = ask(node, "REPLAY GROUP orders g from=earliest").split()[1]
    with GroupConsumer(node.consume_dsn, "orders", "g", window=5, context=context,
                       confirm=True) as g:
        held = [g.receive(10) for _ in range(5)]  # its window full of the replay's
        assert all(message is not None for message in held)
        answer = ask(node, f"REPLAY CANCEL {replay_id}")
        assert answer == (f"cancelled replay {replay_id} of topic orders group g: 50 messages "
                          "read and not acked deleted\n")
        assert replays(node) == []
        produce(node, context, [b"live"])
        live = g.receive(10)  # the window is free again
        assert live is not None and live.parts[0] == b"live"
        g.ack_many(held)  # ACKs of a cancelled replay: unknown, and harmless
        g.ack_confirmed([live])
        assert g.receive(0.3) is None
    assert ask(node, f"REPLAY CANCEL {replay_id}").startswith(f"ERROR: no replay '{replay_id}'")
    node.restart()
    assert replays(node) == []
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as g:
        assert g.receive(0.5) is None  # nothing of it came back


def test_a_replay_goes_with_its_group(start_inproc_node, context, tmp_path):
    node = archived_node(start_inproc_node, tmp_path, "--replay-rate", "20")
    archived_and_gone(node, context, [b"r%d" % n for n in range(100)])
    ask(node, "REPLAY GROUP orders g from=earliest")
    assert replays(node)[0]["state"] == "reading"
    assert ask(node, "REMOVE GROUP orders g").startswith("removed group g")
    wait_until(lambda: replays(node) == [], 10, message="the replay gone with its group")
    node.restart()
    assert replays(node) == []


def test_the_rate_limits_the_reader(start_inproc_node, context, tmp_path):
    node = archived_node(start_inproc_node, tmp_path, "--replay-rate", "200")
    archived_and_gone(node, context, [b"r%d" % n for n in range(500)])
    began = time.monotonic()
    ask(node, "REPLAY GROUP orders g from=earliest")
    wait_until(lambda: replays(node)[0]["read"] == "500", 20, message="all read")
    assert time.monotonic() - began >= 1.4  # 500 at 200 a second, 200 saved up at most


def test_a_seek_to_a_time_goes_on_into_the_archive(start_inproc_node, context, tmp_path):
    node = archived_node(start_inproc_node, tmp_path)
    archived_and_gone(node, context, [b"old"])
    since_us = time.time_ns() // 1000
    archived_and_gone(node, context, [b"archived-1", b"archived-2"])
    node.keep_default()  # stored still for --send-dsn after g ACKs it
    produce(node, context, [b"stored"])
    consume(node, context, 1)
    answer = ask(node, f"SEEK GROUP orders g to={since_us}")
    assert "1 brought back, backlog 1; from the archive: replay " in answer, answer
    assert ": 2 messages" in answer
    assert sorted(m.parts[0] for m in consume(node, context, 3)) == [
        b"archived-1", b"archived-2", b"stored"]


@pytest.mark.parametrize("command, error", [
    ("REPLAY GROUP nope g from=earliest", "no topic 'nope' (topics: orders)"),
    ("REPLAY GROUP orders nope from=earliest", "no group 'nope' in topic orders (groups: g)"),
    ("REPLAY GROUP orders default from=earliest", "a replay is for a named group"),
    ("REPLAY GROUP orders g", "usage: REPLAY GROUP topic group from=earliest|TIME|OFFSET"),
    ("REPLAY GROUP orders g from=yesterday", "from=yesterday is not earliest, an ISO 8601"),
    ("REPLAY GROUP orders g from=earliest to=earliest", "to=earliest is not an ISO 8601"),
    ("REPLAY GROUP orders g from=earliest by=me", "unknown option 'by'"),
    ("REPLAY GROUP orders g from=1", "from=1 is not the start of an archived record: "
                                     "the record at 0 runs to "),
    ("REPLAY GROUP orders g from=999999", "from=999999 is outside the archive of this topic"),
    ("REPLAY GROUP orders g from=2030-01-01 to=2029-01-01", "to= must be later than from="),
    ("REPLAY GROUP orders g from=earliest to=0", "to=0 must be later than from=0"),
    ("REPLAY GROUP orders g from=2099-01-01T00:00:00Z", "nothing to replay: the archive of "
                                                        "topic orders holds no message from="
                                                        "2099-01-01T00:00:00Z (byte offsets "),
    ("REPLAY CANCEL 0000abcd", "no replay '0000abcd' (replays: none)"),
    ("REPLAYS a b", "usage: REPLAYS [topic]"),
    ("REPLAYS ordres", "no topic 'ordres' (topics: orders)"),  # was "no replays"
])
def test_bad_replays_get_one_line(start_inproc_node, context, tmp_path, command, error):
    node = archived_node(start_inproc_node, tmp_path)
    archived_and_gone(node, context, [b"one"])
    answer = ask(node, command)
    assert answer.startswith("ERROR: ") and error in answer and answer.count("\n") <= 1, answer
    assert replays(node) == []


def test_a_node_without_an_archive_says_so(start_inproc_node):
    node = start_inproc_node(*FAST, tcp=True)
    ask(node, "DECLARE TOPIC orders")
    ask(node, "DECLARE GROUP orders g")
    assert ask(node, "REPLAY GROUP orders g from=earliest") == (
        "ERROR: this node has no --archive-dir: there is no archive to replay")
    assert ask(node, "REPLAYS") == "no replays\n"


def test_a_segment_deleted_from_under_the_node_is_refused_not_fatal(start_inproc_node,
                                                                      context, tmp_path):
    """An operator who deletes a topic's first segment by hand: a replay over it is
    refused in one line, and the node serves on (it stopped on a FileNotFoundError);
    a seek to a time passes over the files gone."""
    node = archived_node(start_inproc_node, tmp_path, "--segment-size", "200")
    archived_and_gone(node, context, [b"r%d" % n for n in range(6)])
    segments = sorted((tmp_path / "archive" / "orders").glob("*.dat"))
    assert len(segments) > 2, segments
    since_us = time.time_ns() // 1000 - 60_000_000
    segments[0].unlink()
    for command in ("REPLAY GROUP orders g from=earliest", "REPLAY GROUP orders g from=0"):
        answer = ask(node, command)
        assert answer.startswith("ERROR: cannot read the archive of topic orders: "
                                 "No such file or directory"), answer
        assert answer.count("\n") <= 1, answer
    assert replays(node) == []
    # a seek to a time passes over the files gone, as over those retention deleted
    answer = ask(node, f"SEEK GROUP orders g to={since_us}")
    assert "; from the archive: replay " in answer, answer
    assert len(replays(node)) == 1


def test_a_replay_of_one_message_and_its_cancel_say_one_message(start_inproc_node, context,
                                                                tmp_path):
    """They said "1 messages"."""
    node = archived_node(start_inproc_node, tmp_path)
    archived_and_gone(node, context, [b"only"])
    answer = ask(node, "REPLAY GROUP orders g from=earliest")
    assert ": 1 message from archive byte offset " in answer, answer
    replay_id = answer.split()[1]
    wait_until(lambda: replays(node)[0]["read"] == "1", 10, message="the message read")
    assert ask(node, f"REPLAY CANCEL {replay_id}") == (
        f"cancelled replay {replay_id} of topic orders group g: 1 message read and not "
        "acked deleted\n")
