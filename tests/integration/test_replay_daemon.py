"""Replays on real daemons: pzq-ctl's words for them, and a replay SIGKILLed halfway
that goes on where it was and loses nothing (the verbs alone: test_replay.py)."""

from __future__ import annotations

import pytest

from pzq.cli.ctl import ctl_main
from pzq.client import GroupConsumer
from tests.integration.test_groups import FAST
from tests.integration.test_replay import produce, replays
from tests.integration.test_tools import one_line, tool
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(120)


def ctl(node, *words: str):
    return tool("pzq-ctl", "--dsn", node.monitor_dsn, *words)


@pytest.fixture
def archived(start_node, tmp_path):
    node = start_node(*FAST, "--archive-dir", str(tmp_path / "archive"), "--flush-interval",
                      "50", "--delivery-headers", "--replay-rate", "400", consume=True)
    for words in (("topic", "declare", "orders"), ("group", "declare", "orders", "g")):
        assert ctl(node, *words).returncode == 0
    return node


def test_a_replay_killed_halfway_goes_on_where_it_was_and_loses_nothing(archived, context):
    bodies = [b"m%04d" % n for n in range(1000)]
    produce(archived, context, bodies)
    with GroupConsumer(archived.consume_dsn, "orders", "g", window=500, confirm=True,
                       context=context) as g:
        first = []
        while len(first) < 1000:
            batch = g.receive_many(500, timeout=10)
            assert batch
            g.ack_confirmed(batch)
            first += batch
    archived.wait_stats(lambda s: s["archive"]["archived"] == 1000 and s["messages"] == 0)
    started = ctl(archived, "group", "replay", "orders", "g", "--from", "earliest")
    assert started.returncode == 0, started.stderr
    assert ": 1000 messages from archive byte offset 0 to " in started.stdout
    replay_id, end = started.stdout.split()[1], int(started.stdout.split()[-1])

    acked, held = [], []
    with GroupConsumer(archived.consume_dsn, "orders", "g", window=50, confirm=True,
                       context=context) as g:
        while len(acked) < 300:
            batch = g.receive_many(50, timeout=10)
            assert batch
            g.ack_confirmed(batch)
            acked += batch
        held = g.receive_many(20, timeout=10)  # delivered, not ACKed, at the kill
        assert held
        shown = replays(archived)[0]
        assert int(shown["read"]) < 1000, shown  # the reader is halfway too (400 a second)
        archived.kill()
    archived.restart()

    after = []
    with GroupConsumer(archived.consume_dsn, "orders", "g", window=100, confirm=True,
                       context=context) as g:
        while True:
            batch = g.receive_many(100, timeout=3)
            if not batch:
                break
            g.ack_confirmed(batch)
            after += batch
    acked_bodies = [message.parts[0] for message in acked]
    after_bodies = [message.parts[0] for message in after]
    assert not set(acked_bodies) & set(after_bodies)  # an ACK confirmed holds
    assert len(after_bodies) == len(set(after_bodies))  # once each after the restart
    assert sorted(acked_bodies + after_bodies) == bodies  # nothing lost
    again = {message.parts[0]: message for message in after}
    assert all(int(again[message.parts[0]].headers["DELIVERY"]) >= 2 for message in held)
    assert all(message.key.startswith(replay_id.encode()) for message in after)
    wait_until(lambda: replays(archived)[0]["state"] == "done", 10, message="the replay done")
    listed = ctl(archived, "group", "replays", "orders")
    assert listed.returncode == 0
    assert listed.stdout.startswith(f"{replay_id} topic=orders group=g from=earliest ")
    assert " read=1000 " in listed.stdout and " acked=1000 " in listed.stdout
    # nothing archived a second time: the log ends where it did
    assert archived.stats()["archive"]["topics"]["orders"]["last_offset"] == end


def test_pzq_ctl_replays_cancels_and_refuses_in_one_line(archived, context):
    produce(archived, context, [b"one", b"two"])
    with GroupConsumer(archived.consume_dsn, "orders", "g", confirm=True,
                       context=context) as g:
        g.ack_confirmed([g.receive(10), g.receive(10)])
    archived.wait_stats(lambda s: s["archive"]["archived"] == 2)
    assert ctl(archived, "group", "replays").stdout == "no replays\n"
    started = ctl(archived, "group", "replay", "orders", "g", "--from", "0", "--to", "0")
    assert started.returncode == 1
    assert one_line(started.stderr) == "pzq-ctl: ERROR: to=0 must be later than from=0"
    started = ctl(archived, "group", "replay", "orders", "g", "--from", "2099-01-01")
    assert started.returncode == 1
    assert one_line(started.stderr).startswith("pzq-ctl: ERROR: nothing to replay: ")
    started = ctl(archived, "group", "replay", "orders", "g", "--from", "2000-01-01")
    assert started.returncode == 0 and ": 2 messages " in started.stdout
    replay_id = started.stdout.split()[1]
    cancelled = ctl(archived, "group", "replay", "--cancel", replay_id)
    assert cancelled.returncode == 0
    assert cancelled.stdout.startswith(f"cancelled replay {replay_id} of topic orders group g")
    for words, error in [
        (("group", "replay", "orders", "nope", "--from", "earliest"),
         "ERROR: no group 'nope' in topic orders"),
        (("group", "replay", "--cancel", replay_id), f"ERROR: no replay '{replay_id}'"),
    ]:
        result = ctl(archived, *words)
        assert result.returncode == 1 and error in one_line(result.stderr), (words, result)


@pytest.mark.parametrize("words, error", [
    (("group", "replay", "orders", "g"), "group replay needs --from WHERE"),
    (("group", "replay", "orders", "g", "--from", "soon"),
     "from=soon is not earliest, an ISO 8601 time"),
    (("group", "replay", "orders", "g", "--from", "earliest", "--to", "earliest"),
     "to=earliest is not an ISO 8601 time"),
    (("group", "replay", "orders"), "group replay needs TOPIC and NAME"),
    (("group", "replay", "--cancel", "ab", "orders"), "unrecognized arguments: orders"),
    (("group", "replays", "orders", "g"), "group replays takes at most a TOPIC"),
    (("group", "declare", "orders", "h", "--from", "earliest"),
     "--from is for group replay only"),
    (("group", "pending", "orders", "g", "--to", "1"), "--to is for group seek and group "
                                                       "replay only"),
])
def test_pzq_ctl_refuses_a_bad_replay_command_line_before_asking(words, error, capsys):
    with pytest.raises(SystemExit) as exited:
        ctl_main(["--dsn", "tcp://127.0.0.1:9", *words])
    assert exited.value.code == 2
    assert error in one_line(capsys.readouterr().err)
