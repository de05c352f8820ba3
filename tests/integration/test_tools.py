"""The command-line clients as a user meets them: one line for bad input, no silent waits."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pzq import aio, reach, security
from pzq.cli import bench, human
from pzq.cli.waiting import endpoint_state
from pzq.client import GroupConsumer, RoutedGroupConsumer, RouteTable
from pzq.errors import ConsumeRefused
from tests.support.harness import NodeProcess, wait_until

pytestmark = pytest.mark.timeout(60)
BIN = Path(sys.executable).parent


def at_a_terminal() -> None:
    """Ctrl-C as at a terminal: a suite started in the background (where the shell
    ignores SIGINT, and its children inherit that) still tests the tools' handling."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory):
    """One node for the tests that each keep to a topic of their own (and its groups),
    with an ack timeout no test waits out: what comes back came back at once."""
    node = NodeProcess(tmp_path_factory.mktemp("tools") / "db", "--ack-timeout", "60000000",
                       consume=True).start()
    yield node
    node.kill()


def topic_messages(node: NodeProcess, topic: str) -> int:
    return node.stats()["topics"].get(topic, {}).get("messages", 0)


def line_within(stream, seconds: float = 10) -> str:
    """The next line a tool writes, failing after ``seconds`` without one."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no line within {seconds} s"
    return stream.readline()


def tool(name: str, *args: str, stdin: str = "", timeout: float = 40, columns: int | None = None
         ) -> subprocess.CompletedProcess[str]:
    """``columns``: the terminal width tables are drawn for (else the tool's default)."""
    env = {**os.environ, "COLUMNS": str(columns)} if columns else None
    return subprocess.run([str(BIN / name), *args], input=stdin, capture_output=True, check=False,
                          text=True, timeout=timeout, env=env)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("name, extra", [("pzq-produce", ()), ("pzq-consume", ()),
                                         ("pzq-monitor", ()), ("pzq-ctl", ("pending",))])
@pytest.mark.parametrize("dsn, message", [
    ("bogus", "bogus is not a ZeroMQ endpoint"),
    ("tcp://127.0.0.1", "needs a host and a port"),
    ("pgm://x", "cannot connect to pgm://x: Protocol not supported"),
])
def test_a_bad_endpoint_is_one_line_and_exit_2(name, extra, dsn, message):
    result = tool(name, "--dsn", dsn, *extra, stdin="x\n")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith(f"{name}: error: ") and message in line


def test_consume_with_no_node_says_so_once_and_honours_timeout(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    started = time.monotonic()
    result = tool("pzq-consume", "--dsn", nowhere, "--timeout", "2.5")
    assert time.monotonic() - started < 15
    assert result.returncode == 1
    waiting, error = result.stderr.strip().splitlines()
    assert waiting == (f"pzq-consume: waiting for deliveries from {nowhere}: nothing answers "
                       "there yet (is the node running?)")
    assert error.startswith(f"pzq-consume: error: nothing delivered within 2.5 s from {nowhere}")


def test_consume_idle_timeout_against_no_node_is_an_error(tmp_path):
    result = tool("pzq-consume", "--dsn", f"ipc://{tmp_path}/no-node", "--idle-timeout", "1.5")
    assert result.returncode == 1
    assert "error: nothing answers at" in result.stderr


def tools_at_once(*commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Tools run side by side (each waits its own seconds): their results, in order."""
    processes = [subprocess.Popen([str(BIN / name), *args], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for name, *args in commands]
    results = []
    for process in processes:
        with process:
            stdout, stderr = process.communicate(timeout=40)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                                   stderr))
    return results


def test_consume_says_what_is_wrong_at_an_endpoint_that_will_not_deliver(shared_node,
                                                                          tmp_path):
    public, secret = security.generate(tmp_path, "client")
    keys = ("--curve-client-key", str(secret), "--curve-server-key", str(public))
    wait = ("pzq-consume", "--timeout", "1", "--dsn")
    producer_port, consume_port, with_keys, group_at_send = tools_at_once(
        (*wait, shared_node.receive_dsn), (*wait, shared_node.consume_dsn),
        (*wait, shared_node.send_dsn, *keys),
        (*wait, shared_node.send_dsn, "--topic", "t", "--group", "g"))
    for result in (producer_port, consume_port):
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1].endswith(
            ": connected, but this is not a node's --send-dsn: a ROUTER answers there (its "
            "--receive-dsn or --monitor-dsn; its --consume-dsn needs --topic and --group)")
    assert with_keys.stderr.splitlines()[-1].endswith(
        f"{shared_node.send_dsn}: the node does not use CURVE (NULL): leave out "
        "--curve-client-key and --curve-server-key")
    assert group_at_send.stderr.splitlines()[-1].endswith(
        f"{shared_node.send_dsn}: connected, but this is not a node's --consume-dsn: no ROUTER "
        "answers there (its --send-dsn? that needs no --topic and --group)")


RECEIVE_ANSWERED = ("this is not a node's --consume-dsn: it answered as a node's "
                    "--receive-dsn does, with a producer's ACK; give the node's --consume-dsn")
MONITOR_ANSWERED = ("this is not a node's --consume-dsn: it answered as a node's "
                    "--monitor-dsn does, with ERROR: unknown command; give the node's "
                    "--consume-dsn")


def test_a_groups_consumer_at_another_endpoint_of_the_node_is_told_at_once(shared_node):
    """The node's --receive-dsn and --monitor-dsn answer a CONSUME (their own reply,
    after the request's frames): a group's consumer there waited out its timeout and
    said 'connected, no answer yet' (pzq-consume) or 'a busy node, not a pzq endpoint,
    or a node that requires CURVE' (GroupConsumer)."""
    wrong = [(shared_node.receive_dsn, RECEIVE_ANSWERED),
             (shared_node.monitor_dsn, MONITOR_ANSWERED)]
    results = tools_at_once(*[("pzq-consume", "--timeout", "30", "--dsn", dsn, "--topic", "t",
                               "--group", "g") for dsn, _ in wrong])
    for result, (_, said) in zip(results, wrong, strict=True):
        assert result.returncode == 1
        assert result.stderr.splitlines() == [f"pzq-consume: error: {said}"]

    async def joins(dsn: str) -> None:
        await aio.GroupConsumer(dsn, "t", "g", timeout=30).join()

    for dsn, said in wrong:
        started = time.monotonic()
        with pytest.raises(ConsumeRefused) as refused:
            GroupConsumer(dsn, "t", "g", timeout=30)
        assert str(refused.value) == said
        with pytest.raises(ConsumeRefused) as refused:
            asyncio.run(joins(dsn))
        assert str(refused.value) == said
        assert time.monotonic() - started < 10


SEND_ANSWERED = ("this is not a node's --consume-dsn: a DEALER answers there, as a node's "
                 "--send-dsn does (no ROUTER); give the node's --consume-dsn")


def test_a_groups_consumer_at_the_nodes_send_dsn_is_told_at_once(shared_node):
    """The node's --send-dsn (a DEALER) takes a group consumer's connection and never
    answers: it waited out its timeout, then blamed 'a busy node, not a pzq endpoint,
    or a node that requires CURVE'. Its probe finds no ROUTER there after a second.
    At --consume-dsn it joins as before."""
    started = time.monotonic()
    [result] = tools_at_once(("pzq-consume", "--timeout", "30", "--dsn", shared_node.send_dsn,
                              "--topic", "t", "--group", "g"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"pzq-consume: error: {SEND_ANSWERED}"]
    assert time.monotonic() - started < 10

    async def joins(dsn: str, topic: str = "t") -> bool:
        async with aio.GroupConsumer(dsn, topic, "g", timeout=30) as consumer:
            return consumer.joined

    started = time.monotonic()
    with pytest.raises(ConsumeRefused) as refused:
        GroupConsumer(shared_node.send_dsn, "t", "g", timeout=30)
    assert str(refused.value) == SEND_ANSWERED
    with pytest.raises(ConsumeRefused) as refused:
        asyncio.run(joins(shared_node.send_dsn))
    assert str(refused.value) == SEND_ANSWERED
    assert time.monotonic() - started < 10

    with GroupConsumer(shared_node.consume_dsn, "sent-to-send", "g", timeout=30,
                       declare=True) as consumer:
        assert consumer.joined
    assert asyncio.run(joins(shared_node.consume_dsn, "sent-to-send"))


@pytest.mark.parametrize("role, said", [("send", SEND_ANSWERED), ("receive", RECEIVE_ANSWERED),
                                        ("monitor", MONITOR_ANSWERED)])
def test_routed_and_unwaited_group_consumers_at_another_endpoint_are_told_at_once(
        shared_node, role, said):
    """A route table naming the node's --send-dsn, --receive-dsn or --monitor-dsn as its
    consume endpoint, and a GroupConsumer made with wait=False (read by ``answered``,
    as a routed consumer reads its joins). At the --send-dsn, which never answers, the
    routed consumers waited out their 30 s timeout, then said 'no node in the route
    table has a consume endpoint', and ``answered`` said False for ever; each now asks
    the probe after a second, as GroupConsumer does."""
    wrong = getattr(shared_node, f"{role}_dsn")

    def misrouted(table):
        for node in table.nodes.values():  # (the table's data: this node's ROUTES answer)
            node["consume"] = wrong
        return table

    async def routed() -> None:
        table = aio.RouteTable(shared_node.monitor_dsn)
        await table.known()
        async with aio.RoutedGroupConsumer(misrouted(table), "t", "g", timeout=30):
            pytest.fail(f"joined a group at the node's --{role}-dsn")

    started = time.monotonic()
    with pytest.raises(ConsumeRefused) as refused:
        RoutedGroupConsumer(misrouted(RouteTable(shared_node.monitor_dsn)), "t", "g",
                            timeout=30)
    assert str(refused.value) == said
    with pytest.raises(ConsumeRefused) as refused:
        asyncio.run(routed())
    assert str(refused.value) == said
    unwaited = GroupConsumer(wrong, "t", "g", timeout=30, wait=False)
    try:
        with pytest.raises(ConsumeRefused) as refused:
            wait_until(unwaited.answered, 10, message="answered's refusal")
    finally:
        unwaited.close()
    assert str(refused.value) == said
    assert time.monotonic() - started < 15


def test_a_routed_consumer_names_the_nodes_it_waits_on_and_a_cause_once(shared_node, tmp_path):
    nowhere = f"ipc://{tmp_path}/no-monitor"
    routed = ("pzq-consume", "--topic", "routed", "--group", "g", "--routes")
    waiting, no_table = tools_at_once((*routed, shared_node.monitor_dsn, "--timeout", "1"),
                                      (*routed, nowhere))
    state = f"{shared_node.consume_dsn}: connected, nothing to deliver yet"
    assert waiting.stderr.splitlines() == [
        f"pzq-consume: waiting for deliveries from {state}",
        f"pzq-consume: error: nothing delivered within 1 s from {state}"]
    assert no_table.stderr.splitlines() == [  # said a second in, as the wait above
        f"pzq-consume: no answer yet from {nowhere}: nothing answers there (is the node "
        "running?); waiting up to 5 s",
        f"pzq-consume: error: no node answered ROUTES: no answer from {nowhere} within 5 s: "
        "nothing answers there (is the node running?)"]


def test_consume_says_it_is_connected_and_waits_for_messages(node):
    result = tool("pzq-consume", "--dsn", node.send_dsn, "--timeout", "1.5")
    assert result.returncode == 1
    assert f"{node.send_dsn}: connected, nothing to deliver yet" in result.stderr


def test_consume_says_when_its_node_is_killed_and_when_it_answers_again(node):
    """It waited without a word once the node it had was gone."""
    consuming = subprocess.Popen([str(BIN / "pzq-consume"), "--dsn", node.send_dsn],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert line_within(consuming.stderr).rstrip("\n") == (
            f"pzq-consume: waiting for deliveries from {node.send_dsn}: connected, nothing "
            "to deliver yet")
        node.kill()
        assert line_within(consuming.stderr, 30).rstrip("\n") == (
            f"pzq-consume: {node.send_dsn}: no connection for 5.0 s: its connection was lost "
            "(the node stopped, or did not answer the connection's heartbeats); trying on")
        node.restart()
        again = line_within(consuming.stderr, 30)
        assert again.startswith(f"pzq-consume: {node.send_dsn} answers again (no connection "
                                "for "), again
    finally:
        consuming.kill()
        consuming.communicate()


def test_produce_with_no_node_says_what_it_waits_for(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    result = tool("pzq-produce", "--dsn", nowhere, "--timeout", "2.5", stdin="a\nb\n")
    assert result.returncode == 1
    waiting, error = result.stderr.strip().splitlines()
    assert waiting == (f"pzq-produce: no ACK yet from {nowhere} for 2 messages: nothing answers "
                       "there (is the node running?); waiting up to 2.5 s")
    assert error.startswith(f"pzq-produce: error: no ACK from {nowhere} within 2.5 s for 2 ")


def test_produce_with_no_node_says_it_waits_no_longer_than_its_ack_timeout(tmp_path):
    """It said "waiting up to 30 s" (--timeout) and gave them up after 3."""
    nowhere = f"ipc://{tmp_path}/no-node"
    result = tool("pzq-produce", "--dsn", nowhere, "--ack-timeout", "3", stdin="a\nb\n")
    assert result.returncode == 1
    waiting, given_up = result.stderr.strip().splitlines()
    assert waiting == (f"pzq-produce: no ACK yet from {nowhere} for 2 messages: nothing answers "
                       "there (is the node running?); waiting up to 3 s (--ack-timeout)")
    assert given_up.startswith("pzq-produce: 2 messages without ACK within 3 s (NO_ACK)")


def test_produce_and_consume_against_a_node(node):
    produced = tool("pzq-produce", "--dsn", node.receive_dsn, stdin="one\ntwo\n")
    assert produced.returncode == 0 and produced.stdout.count(" ok") == 2
    assert produced.stderr == ""
    consumed = tool("pzq-consume", "--dsn", node.send_dsn, "--count", "2")
    assert consumed.returncode == 0 and consumed.stderr == ""
    assert [line.split()[-1] for line in consumed.stdout.splitlines()] == ["one", "two"]


def test_produce_says_in_words_what_it_gave_up_without_an_ack(node):
    """A message without its ACK within --ack-timeout is given up (NO_ACK): neither
    stored for sure nor refused once the node took the tool's handshake; never sent
    before (a node stopped from the start). The tool says which in its own words, and
    exits 1 as for an ACK that failed."""
    node.pause()  # (the system accepts the connection; the node never greets it)
    try:
        result = tool("pzq-produce", "--dsn", node.receive_dsn, "--ack-timeout", "1.5",
                      stdin="a\nb\n")
    finally:
        node.resume()
    assert result.returncode == 1, result
    assert [line.split()[1:] for line in result.stdout.splitlines()] == [
        ["failed", "NO_ACK"]] * 2
    assert result.stderr.splitlines()[-1] == (
        "pzq-produce: 2 messages without ACK within 1.5 s (NO_ACK): never reached the node "
        "(no handshake with it was taken: a node down, or one that refuses this client's "
        "keys), so nothing was stored; send them again")
    routed = tool("pzq-produce", "--routes", node.monitor_dsn, "--topic", "t",
                  "--ack-timeout", "1")
    assert routed.returncode == 2 and "--ack-timeout goes with --dsn" in routed.stderr
    process = subprocess.Popen([str(BIN / "pzq-produce"), "--dsn", node.receive_dsn,
                                "--ack-timeout", "1.5"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        process.stdin.write("c\n")
        process.stdin.flush()
        assert line_within(process.stdout).endswith(" ok\n")  # the handshake taken
        node.pause()
        try:
            _, stderr = process.communicate("d\n", timeout=30)
        finally:
            node.resume()
    finally:
        process.kill()
    assert process.returncode == 1
    assert stderr.splitlines()[-1] == (
        "pzq-produce: 1 message without ACK within 1.5 s (NO_ACK): the node may have "
        "stored it or not; send it again with the same DEDUP-ID header to have it stored "
        "once")


def test_produce_whose_output_pipe_closed_ends_quietly(shared_node):
    process = subprocess.Popen([str(BIN / "pzq-produce"), "--dsn", shared_node.receive_dsn,
                                "--topic", "unread-acks"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    process.stdout.close()  # as head -1 does once it has its line: no reader is left
    _, stderr = process.communicate("".join(f"{n}\n" for n in range(3000)), timeout=30)
    assert (process.returncode, stderr) == (0, "")


# SIGTERM (a supervisor's stop, timeout, docker stop) as Ctrl-C: it died silently
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_produce_at_a_terminal_shows_each_ack_as_it_comes_and_what_an_interrupt_leaves(
        shared_node, stop):
    controller, terminal = pty.openpty()
    topic = f"typed-{stop.name}"
    process = subprocess.Popen([str(BIN / "pzq-produce"), "--dsn", shared_node.receive_dsn,
                                "--topic", topic], stdin=terminal, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=at_a_terminal)
    try:
        os.write(controller, b"first\n")
        assert line_within(process.stdout).endswith(" ok\n")  # before the input ends
        shared_node.pause()
        try:
            os.write(controller, b"second\n")
            assert line_within(process.stderr).startswith(
                f"pzq-produce: no ACK yet from {shared_node.receive_dsn} for 1 message: ")
            process.send_signal(stop)
            assert process.wait(20) == 130
        finally:
            shared_node.resume()
        assert process.stderr.read() == ("pzq-produce: interrupted with 1 message sent and "
                                         "not ACKed yet: the node may have stored it\n")
        assert process.stdout.read() == ""
    finally:
        process.kill()
        process.communicate()
        os.close(controller)
        os.close(terminal)
    wait_until(lambda: topic_messages(shared_node, topic) == 2, message="second stored")


def test_produce_refuses_a_line_without_a_key_and_sends_nothing_from_it_on(shared_node):
    result = tool("pzq-produce", "--dsn", shared_node.receive_dsn, "--topic", "keyed",
                  "--key-from-line", stdin="k1\tone\nno tab here\nk3\tthree\n")
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "pzq-produce: error: line 2 has no tab: --key-from-line reads KEY<tab>body; "
        "nothing from line 2 on was sent")
    assert result.stdout.count(" ok") == 1  # line 1's ACK, reported before the error
    assert topic_messages(shared_node, "keyed") == 1


def consume_into_head_3(*args: str) -> list[str]:
    """``pzq-consume ARGS | head -3``: the bodies head printed, once pzq-consume has
    ended quietly on its own."""
    consume = subprocess.Popen([str(BIN / "pzq-consume"), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    with consume:
        try:
            head = subprocess.run(["head", "-3"], stdin=consume.stdout, capture_output=True,
                                  text=True, timeout=20, check=True)
            consume.stdout.close()
            assert consume.wait(10) == 0  # it saw its reader go
        finally:
            consume.kill()
        assert consume.stderr.read() == ""
    return [line.split()[-1] for line in head.stdout.splitlines()]


def consume_whose_reader_left(*args: str) -> None:
    """pzq-consume, waiting for a delivery, ends quietly once its reader has gone."""
    waiting = subprocess.Popen([str(BIN / "pzq-consume"), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    with waiting:
        waiting.stdout.close()  # as head does once it has its lines
        try:
            assert waiting.wait(10) == 0
        finally:
            waiting.kill()
        assert waiting.stderr.read() == ""


def test_a_group_consumer_into_a_pipe_acks_only_what_its_reader_took(shared_node):
    lines = "".join(f"{n}\n" for n in range(1, 51))
    tool("pzq-produce", "--dsn", shared_node.receive_dsn, "--topic", "piped", stdin=lines)
    group = ("--dsn", shared_node.consume_dsn, "--topic", "piped", "--group")
    assert consume_into_head_3(*group, "g") == ["1", "2", "3"]

    def figures() -> dict:
        return shared_node.stats()["topics"]["piped"]["groups"]["g"]

    # the 47 never read were given back at once (BYE), not at their ack deadline
    wait_until(lambda: figures()["inflight"] == 0, message="unread deliveries back")
    assert (figures()["acked"], figures()["backlog"]) == (3, 47)
    consume_whose_reader_left(*group, "later", "--start", "latest")


def test_a_send_dsn_consumer_into_a_pipe_acks_only_what_its_reader_took(start_node):
    node = start_node("--ack-timeout", "2s")
    tool("pzq-produce", "--dsn", node.receive_dsn, stdin="".join(f"{n}\n" for n in range(1, 51)))
    assert consume_into_head_3("--dsn", node.send_dsn) == ["1", "2", "3"]
    wait_until(lambda: node.figures()["messages"] == 47, message="3 ACKs")
    # given back by NACKs, but what the node sent again as the consumer left comes
    # back at its ack deadline only
    rest = tool("pzq-consume", "--dsn", node.send_dsn, "--count", "47", "--idle-timeout", "5")
    assert sorted(int(line.split()[-1]) for line in rest.stdout.splitlines()) == list(
        range(4, 51))
    consume_whose_reader_left("--dsn", node.send_dsn)


def test_produce_refuses_a_header_that_is_not_name_value():
    result = tool("pzq-produce", "--header", "nocolon", stdin="x\n")
    assert result.returncode == 2
    assert one_line(result.stderr) == ("pzq-produce: error: --header nocolon is not NAME:value, "
                                       "e.g. TOPIC:orders")


def test_monitor_json_on_a_down_node_says_why(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    result = tool("pzq-monitor", "--dsn", nowhere, "--json", "--timeout", "0.5")
    assert result.returncode == 3
    answer = json.loads(result.stdout)
    assert answer["up"] is False and answer["monitor"] == nowhere
    assert "nothing answers there" in answer["error"]


def test_monitor_table_of_its_only_node_down_shows_it_down(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    result = tool("pzq-monitor", "--dsn", nowhere, "--timeout", "0.5")
    assert result.returncode == 3
    assert nowhere in result.stdout
    (node_row,) = [line for line in result.stdout.splitlines() if " node " in line]
    assert "DOWN" in node_row
    assert one_line(result.stderr).startswith(f"pzq-monitor: no answer from {nowhere}")


def test_monitor_watch_json_prints_one_line_per_refresh(node):
    result = tool("pzq-monitor", "--dsn", node.monitor_dsn, "--watch", "--json",
                  "--iterations", "3", "--interval", "0.2")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert all(json.loads(line)["node_id"] == node.stats()["node_id"] for line in lines)


def test_monitor_watch_json_says_on_stderr_what_it_waits_for(node):
    """Each refresh waited --timeout for a node killed, without a word."""
    node.kill()
    result = tool("pzq-monitor", "--dsn", node.monitor_dsn, "--watch", "--json",
                  "--iterations", "1", "--timeout", "2")
    assert result.returncode == 3
    assert json.loads(result.stdout)["up"] is False
    assert result.stderr.splitlines() == [
        f"pzq-monitor: no answer yet from {node.monitor_dsn}: nothing answers there (is the "
        "node running?); waiting up to 2 s"]


def test_monitor_watch_at_a_terminal_says_what_it_waits_for_in_its_view(tmp_path):
    """The live view took the waiting line as stderr's, printed across the screen's
    table (rich draws stderr there), where the view says it instead."""
    nowhere = f"ipc://{tmp_path}/no-monitor"
    controller, terminal = pty.openpty()
    process = subprocess.Popen([str(BIN / "pzq-monitor"), "--dsn", nowhere, "--watch",
                                "--iterations", "1", "--timeout", "2"],
                               stdin=subprocess.DEVNULL, stdout=terminal,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "COLUMNS": "400"})  # no line wraps
    os.close(terminal)
    shown = b""
    try:
        while True:  # the terminal's output until the tool ends (EIO: no writer left)
            ready, _, _ = select.select([controller], [], [], 20)
            assert ready, "pzq-monitor --watch drew nothing within 20 s"
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        assert process.wait(20) == 3
    finally:
        process.kill()
        process.communicate()
        os.close(controller)
    screen = shown.decode(errors="replace")
    assert f"no answer yet from {nowhere}: nothing answers there" in screen
    assert "pzq-monitor: no answer yet" not in screen  # not as a line of stderr's


@pytest.mark.timeout(60)
def test_monitor_watch_full_screen_shows_why_a_node_is_down_on_a_short_terminal(tmp_path):
    """The reason was the table's caption, below the screen's 24 lines (the node table
    alone is taller), so a full-screen watch of a node down never said why."""
    nowhere = f"ipc://{tmp_path}/no-monitor"
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    process = subprocess.Popen([str(BIN / "pzq-monitor"), "--dsn", nowhere, "--watch",
                                "--timeout", "1", "--interval", "0.2"],
                               stdin=terminal, stdout=terminal, stderr=subprocess.PIPE,
                               preexec_fn=at_a_terminal,  # rich takes COLUMNS over the pty's
                               env={**os.environ, "COLUMNS": "200", "LINES": "24"})
    os.close(terminal)
    shown = b""
    reason = f"no answer from {nowhere} within 1 s".encode()
    try:
        deadline = time.monotonic() + 30
        while reason not in shown:
            assert time.monotonic() < deadline, "the reason never showed: " + repr(shown[-400:])
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                shown += os.read(controller, 65536)
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 3
    finally:
        process.kill()
        process.communicate()
        os.close(controller)


def test_piped_table_keeps_long_node_names_whole(start_node):
    # a short folder of its own: an ipc path must fit in 107 bytes, and the test
    # runner's own folders can take most of them
    with tempfile.TemporaryDirectory(prefix="pzq-", dir="/tmp") as folder:
        monitor = f"ipc://{folder}/a-monitor-endpoint-with-a-long-name"
        node = start_node("--monitor-dsn", monitor)
        result = tool("pzq-monitor", "--dsn", monitor, "--dsn", node.monitor_dsn + "0")
        assert monitor in result.stdout
        assert node.stats()["node_id"] in result.stdout
        node.kill()


@pytest.mark.parametrize("value, shown", [
    (0, "0"), (0.5, "0.5"), (0.333, "0.33"), (7.25, "7.25"), (42.26, "42.3"), (12345.6, "12,346")])
def test_rates_keep_sensible_decimals(value, shown):
    assert human.rate(value) == shown


@pytest.mark.parametrize("seconds, shown", [
    (0.25, "250 ms"), (13.2278, "13.2 s"), (402.947, "6 min 42 s"), (7300, "2 h 1 min"),
    (200_000, "2 d 7 h"), (300, "5 min"), (7200, "2 h")])
def test_durations_for_people(seconds, shown):
    assert human.duration(seconds) == shown


def test_latency_for_people():
    assert human.latency_ms(13227.821) == "13.2 s"
    assert human.latency_ms(3.456) == "3.46 ms"
    assert human.latency_ms(250.4) == "250 ms"


def test_bench_png_without_matplotlib_fails_at_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # how Python hides a module
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--smoke", "--png", str(tmp_path / "b.png")])
    assert exit_info.value.code == 2 and time.monotonic() - started < 2
    assert "pip install 'pzq[bench]'" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "b.png").exists()


def test_help_texts_have_no_rst_markup_and_show_defaults():
    for name in ("pzq-produce", "pzq-consume", "pzq-monitor", "pzq-ctl", "pzq-keygen",
                 "pzq-bench", "pzq-exporter", "pzq-archive", "pzq"):
        text = tool(name, "--help").stdout
        assert "``" not in text, name
        assert "(default: )" not in " ".join(text.split()), name  # an empty default
    def help_of(name: str) -> str:
        return " ".join(tool(name, "--help").stdout.split())

    assert "the node's --receive-dsn (default: tcp://127.0.0.1:11131)" in help_of("pzq-produce")
    assert "messages sent ahead of ACKs (default: 100)" in help_of("pzq-produce")
    assert "(default: tcp://127.0.0.1:11132)" in help_of("pzq-consume")
    assert "stop after N messages; 0 for no limit (default: 0)" in help_of("pzq-consume")
    assert "1 to 100000 (default: 100)" in help_of("pzq-consume")
    assert "(default: ipc:///tmp/pzq-monitor)" in help_of("pzq-ctl")
    assert "seconds between polls (default: 1.0)" in help_of("pzq-monitor")


def test_a_ctl_command_help_shows_the_tools_defaults():
    """``pzq-ctl pending --help`` listed --dsn and --timeout without the defaults that
    ``pzq-ctl --help`` shows (a command's copies of them have none of their own)."""
    text = " ".join(tool("pzq-ctl", "pending", "--help").stdout.split())
    assert "the node's --monitor-dsn (default: ipc:///tmp/pzq-monitor)" in text
    assert "seconds to wait for the answer (default: 10.0)" in text


def test_keygen_refuses_to_overwrite_a_key_pair(tmp_path):
    assert tool("pzq-keygen", str(tmp_path), "node").returncode == 0
    public = (tmp_path / "node.key").read_bytes()
    again = tool("pzq-keygen", str(tmp_path), "node")
    assert again.returncode == 3
    assert "exists; give --force" in one_line(again.stderr)
    assert (tmp_path / "node.key").read_bytes() == public
    assert tool("pzq-keygen", str(tmp_path), "node", "--force").returncode == 0
    assert (tmp_path / "node.key").read_bytes() != public


@pytest.mark.parametrize("args", [("--check", "--max-pending-acks", "-1"),
                                  ("--watch", "--iterations", "-1")])
def test_monitor_refuses_a_negative_count(node, args):
    """--max-pending-acks -1 judged a healthy node unhealthy ("0 producer ACKs cannot be
    sent", exit 1); --iterations -1 ended at once with nothing shown, exit 0."""
    ran = tool("pzq-monitor", "--dsn", node.monitor_dsn, *args)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert one_line(ran.stderr).endswith(f"argument {args[1]}: -1: give a whole number 0 or more")


@pytest.mark.parametrize("args, refused", [(("topic", "declare", ""), "topic ''"),
                                           (("topic", "remove", "two words"), "topic 'two words'"),
                                           (("group", "declare", "orders", ""), "group ''")])
def test_ctl_refuses_a_name_the_node_cannot_take(node, args, refused):
    """An empty name, or one with a space, went to the node as a command it could not
    parse: the answer was the monitor's usage line (ERROR: usage: DECLARE TOPIC name
    [max_messages=N] ...), naming a command the user never typed, and exit 1."""
    ran = tool("pzq-ctl", "--dsn", node.monitor_dsn, *args)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert f"argument name: {refused} must be 1-255 of" in one_line(ran.stderr)


@pytest.mark.parametrize("args, refused", [
    (("--topic", "", "--group", "g"), "--topic: topic ''"),
    (("--topic", "orders", "--group", "two words"), "--group: group 'two words'")])
def test_consume_refuses_a_name_the_node_cannot_take_as_ctl_does(shared_node, args, refused):
    """The name went to the node, whose refusal made exit 1; pzq-ctl checks it itself
    (exit 2, naming the argument)."""
    ran = tool("pzq-consume", "--dsn", shared_node.consume_dsn, "--timeout", "5", *args)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert f"argument {refused} must be 1-255 of" in one_line(ran.stderr)
    assert "two words" not in shared_node.stats()["topics"].get("orders", {}).get("groups", {})


def test_a_new_groups_start_takes_an_iso_8601_time_as_seek_does(shared_node):
    """--start took µs only, where group seek --to and group replay take ISO 8601."""
    def produce(body: str) -> None:
        done = tool("pzq-produce", "--dsn", shared_node.receive_dsn, "--topic", "since",
                    stdin=f"{body}\n")
        assert done.returncode == 0, done.stderr

    produce("before")  # stored (and ACKed) before the time taken next
    since = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    produce("after")
    declared = tool("pzq-ctl", "--dsn", shared_node.monitor_dsn, "group", "declare", "since",
                    "declared", "--start", since)
    assert declared.returncode == 0, declared.stderr
    for group in ("made-by-consume", "declared"):  # (declared holds "after" meanwhile)
        consumed = tool("pzq-consume", "--dsn", shared_node.consume_dsn, "--topic", "since",
                        "--group", group, "--start", since, "--idle-timeout", "1")
        assert consumed.returncode == 0, consumed.stderr
        assert [line.split()[-1] for line in consumed.stdout.splitlines()] == ["after"], \
            (group, consumed.stdout, consumed.stderr)


HUGE = "9" * 5000
CUT = "9" * 40 + "..."


@pytest.mark.parametrize("name, args", [
    ("pzq-ctl", ("group", "declare", "orders", "g", "--start", HUGE)),
    ("pzq-ctl", ("topic", "declare", "orders", "--max-age", HUGE + "s")),
    ("pzq-ctl", ("topic", "declare", "orders", "--partitions", HUGE)),
    ("pzq-ctl", ("group", "seek", "orders", "g", "--to", HUGE + "x")),
    ("pzq-ctl", ("pending", HUGE)),
    ("pzq-ctl", (HUGE,)),
    ("pzq-consume", ("--count", HUGE)),
    ("pzq-monitor", ("--iterations", HUGE + "x")),
])
def test_a_huge_value_is_shown_cut_in_the_one_line_error(shared_node, name, args):
    """A 5000-digit value was echoed whole: a one-line error of 5000 characters."""
    dsn = shared_node.consume_dsn if name == "pzq-consume" else shared_node.monitor_dsn
    ran = tool(name, "--dsn", dsn, *args)
    assert (ran.returncode, ran.stdout) == (2, "")
    line = one_line(ran.stderr)
    assert CUT in line and len(line) < 300, line


@pytest.mark.parametrize("name", ["", ".hidden", "../outside", "sub/node"])
def test_keygen_refuses_a_name_that_is_no_plain_file_name(tmp_path, name):
    """An empty name made a hidden ``.key`` that the node's --curve-authorized-keys
    skips; a '/' wrote the pair outside the directory given."""
    ran = tool("pzq-keygen", str(tmp_path / "keys"), name)
    assert ran.returncode == 2
    assert "argument name:" in one_line(ran.stderr)
    assert not any(tmp_path.rglob("*.key*"))



def test_a_refused_header_is_named_without_a_bytes_repr(producer):
    ack = producer.produce([b"body"], headers=[b"nocolon"])
    assert not ack.ok
    assert ack.status_message == b"header frame nocolon is not NAME:value"


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """A tool run with its stdout a pipe nobody reads any more, as after ``| head -1``."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run([str(BIN / args[0]), *args[1:]], stdout=writer,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              timeout=30, check=False)
    finally:
        os.close(writer)


def test_a_tool_whose_output_pipe_closed_ends_quietly(tmp_path, node):
    for args in (("pzq-keygen", str(tmp_path), "pair"),
                 ("pzq-ctl", "--dsn", node.monitor_dsn, "pending")):
        ran = into_closed_pipe(*args)
        assert (ran.returncode, ran.stderr) == (0, ""), args


def test_ctrl_c_stops_a_waiting_consumer_without_a_traceback(tmp_path):
    process = subprocess.Popen([str(BIN / "pzq-consume"), "--dsn", f"ipc://{tmp_path}/no-node"],
                               stderr=subprocess.PIPE, text=True, preexec_fn=at_a_terminal)
    try:
        assert "waiting for deliveries" in process.stderr.readline()
    finally:
        process.send_signal(signal.SIGINT)
    assert process.wait(20) == 130
    assert "Traceback" not in process.stderr.read()
    process.stderr.close()


@pytest.mark.parametrize("args", [("pzq-ctl", "pending"), ("pzq-monitor",)])
def test_ctrl_c_stops_a_waiting_ctl_or_monitor_with_130_and_no_traceback(tmp_path, args):
    process = subprocess.Popen([str(BIN / args[0]), "--dsn", f"ipc://{tmp_path}/no-node",
                                *args[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=at_a_terminal)
    try:
        assert "no answer yet from" in process.stderr.readline()  # it waits
    finally:
        process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == 130
    assert (stdout, stderr) == ("", "")


def test_ctl_and_monitor_given_another_endpoint_of_the_node_say_so(start_node, tmp_path):
    node = start_node("--archive-dir", str(tmp_path / "archive"), "--archive-dsn",
                      "tcp://127.0.0.1:*", consume=True)
    archive_dsn = node.event("node_ready")["archive"]
    for dsn, kind in ((node.receive_dsn, "--receive-dsn"), (node.consume_dsn, "--consume-dsn"),
                      (archive_dsn, "--archive-dsn")):
        wrong = f"{dsn} does not speak the monitor protocol (it answered as a node's {kind} does"
        ctl = tool("pzq-ctl", "--dsn", dsn, "topics")
        assert ctl.returncode == 2 and ctl.stdout == ""
        assert one_line(ctl.stderr).startswith(f"pzq-ctl: error: {wrong}")
        assert one_line(ctl.stderr).endswith("; give the node's --monitor-dsn")
    monitor = tool("pzq-monitor", "--dsn", node.receive_dsn, "--json")
    assert monitor.returncode == 3
    assert json.loads(monitor.stdout)["error"].startswith(
        f"{node.receive_dsn} does not speak the monitor protocol")


NOWHERE_HOST = "tcp://node0.invalid:11133"  # .invalid never resolves (RFC 2606)


def test_ctl_and_monitor_say_at_once_that_a_host_does_not_resolve():
    started = time.monotonic()
    ctl = tool("pzq-ctl", "--dsn", NOWHERE_HOST, "--timeout", "30", "pending")
    assert ctl.returncode == 2
    assert one_line(ctl.stderr).startswith(  # and no "no answer yet" line before it
        f"pzq-ctl: error: cannot connect to {NOWHERE_HOST}: host node0.invalid does not "
        "resolve (")
    monitor = tool("pzq-monitor", "--dsn", NOWHERE_HOST, "--json", "--timeout", "30")
    assert monitor.returncode == 3
    assert "host node0.invalid does not resolve" in json.loads(monitor.stdout)["error"]
    assert time.monotonic() - started < 25  # neither waited for its --timeout


def test_waits_name_a_host_that_does_not_resolve():
    assert reach.why_silent(NOWHERE_HOST, curve=False).startswith(
        "host node0.invalid does not resolve (")
    assert endpoint_state(NOWHERE_HOST, None, "", "").startswith(
        f"{NOWHERE_HOST}: host node0.invalid does not resolve (")
