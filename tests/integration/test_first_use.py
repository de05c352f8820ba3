"""What a new user meets first: the daemon and the tools given wrong or unlucky input
say so in one line with a documented exit code, and never wait in silence."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pzq.cluster.peers import UNREACHED_REPEAT_S, PeerTable
from tests.support.harness import run_pzq, wait_until, without_permission_overrides

pytestmark = pytest.mark.timeout(60)
BIN = Path(sys.executable).parent
LOOPBACK = ("--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
            "--monitor-dsn", "tcp://127.0.0.1:*")


def tool(name: str, *args: str, timeout: float = 40, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / name), *args], capture_output=True, check=False,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- 1. one node per archive directory --------------------------------------------------

def test_a_second_node_on_one_archive_directory_is_refused_until_the_first_is_gone(
        start_node, tmp_path):
    archive = tmp_path / "archive"
    first = start_node("--archive-dir", str(archive))
    second = run_pzq(["--database", str(tmp_path / "other"), "--archive-dir", str(archive),
                      *LOOPBACK])
    assert second.returncode == 3
    assert one_line(second.stderr) == (f"pzq: error: archive directory {archive} is in use "
                                       "by another node (its lock .lock is held)")
    first.kill()  # a crash: the kernel drops the lock with the process
    start_node("--archive-dir", str(archive), database=tmp_path / "other")


@pytest.mark.parametrize("mode", [0o500, 0o300, 0o000])
def test_an_archive_directory_this_user_may_not_use_says_so(tmp_path, mode):
    """It said 'cannot create archive directory' of a folder that was there (and a folder
    it could write but not read was a traceback, exit 1)."""
    prefix = without_permission_overrides()
    archive = tmp_path / "archive"
    archive.mkdir()
    archive.chmod(mode)
    try:
        result = subprocess.run([*prefix, sys.executable, "-m", "pzq", "--database",
                                 str(tmp_path / "db"), "--archive-dir", str(archive), *LOOPBACK],
                                capture_output=True, text=True, timeout=30, check=False,
                                stdin=subprocess.DEVNULL)
    finally:
        archive.chmod(0o700)
    assert result.returncode == 3
    assert one_line(result.stderr) == (f"pzq: error: archive directory {archive} is not "
                                       "readable and writable by this user (permission "
                                       "denied): give it to the node's user")


def test_an_archive_dir_that_is_a_file_says_so(tmp_path):
    archive = tmp_path / "archive"
    archive.write_text("")
    result = run_pzq(["--database", str(tmp_path / "db"), "--archive-dir", str(archive),
                      *LOOPBACK])
    assert result.returncode == 3
    assert one_line(result.stderr) == (f"pzq: error: archive directory {archive} exists and "
                                       "is not a directory")


# -- 2. ports out of range ----------------------------------------------------------------

@pytest.mark.parametrize("flag, port", [("--receive-dsn", "99999"), ("--send-dsn", "-1"),
                                        ("--monitor-dsn", "65536"), ("--consume-dsn", ""),
                                        ("--broadcast-dsn", "87067")])
def test_a_port_out_of_range_is_refused_not_wrapped(tmp_path, flag, port):
    dsn = f"tcp://127.0.0.1:{port}"
    # Before the check, such a node started: the short timeout ends it.
    result = run_pzq(["--database", str(tmp_path / "db"), *LOOPBACK, flag, dsn], timeout=10)
    assert result.returncode == 2
    assert one_line(result.stderr) == (f"pzq: error: {flag} '{dsn}' needs a port from 1 to "
                                       "65535, or * for any free port, e.g. tcp://*:11131")
    assert not (tmp_path / "db").exists()  # refused before anything was made


# -- 3, 4. a tool that waits says so after a second ----------------------------------------

def first_stderr_line_while_waiting(args: list[str]) -> tuple[str, float]:
    """The tool's first stderr line and when it came; the tool must still be waiting."""
    started = time.monotonic()
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline().rstrip("\n")
        elapsed = time.monotonic() - started
        assert process.poll() is None, f"the tool ended instead of waiting: {line}"
        return line, elapsed
    finally:
        process.kill()
        process.communicate(timeout=10)


def test_ctl_says_what_it_waits_for_when_nothing_answers(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    line, elapsed = first_stderr_line_while_waiting(
        [str(BIN / "pzq-ctl"), "--dsn", nowhere, "--timeout", "25", "pending"])
    assert line == (f"pzq-ctl: no answer yet from {nowhere}: nothing answers there (is the "
                    "node running?); waiting up to 25 s")
    assert elapsed < 20


def test_group_consume_against_nothing_says_why_and_honours_idle_timeout(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    started = time.monotonic()
    result = tool("pzq-consume", "--dsn", nowhere, "--topic", "t", "--group", "g",
                  "--idle-timeout", "3")
    assert time.monotonic() - started < 9  # not the 10 s the client waited before
    assert result.returncode == 1
    absent = (f"{nowhere}: nothing answers there yet (is the node running, and started with "
              "--consume-dsn? consumer groups are off without it)")
    assert result.stderr.splitlines() == [
        f"pzq-consume: waiting for the node to take group g of topic t: {absent}",
        f"pzq-consume: error: no answer to CONSUME within 3 s: {absent}"]


# -- 5. the benchmark's nodes from a folder holding a clone named pzq -----------------------

def test_bench_nodes_start_from_a_folder_holding_a_clone_named_pzq(tmp_path, monkeypatch):
    from pzq.bench.nodes import NodeProcess
    clone = tmp_path / "pzq"
    (clone / "pzq").mkdir(parents=True)  # a checkout: pzq/pyproject.toml, pzq/pzq/...
    (clone / "pyproject.toml").write_text("[project]\nname = 'pzq'\n")
    monkeypatch.chdir(tmp_path)
    node = NodeProcess(tmp_path / "db").start()
    assert node.stop() == 0


# -- 6. a config file that is not UTF-8 --------------------------------------------------

def test_a_config_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path):
    config = tmp_path / "pzq.toml"
    config.write_bytes('database = "caf\u00e9"\n'.encode("latin-1"))
    result = run_pzq(["--config", str(config), *LOOPBACK], timeout=10)
    assert result.returncode == 2
    assert one_line(result.stderr) == (f"pzq: error: config file {config} is not UTF-8 text "
                                       "(TOML is): byte 0xe9 at position 15")


# -- 7. a reader that stops reading -------------------------------------------------------

@pytest.mark.parametrize("extra", [(), ("--watch", "--iterations", "3")])
def test_monitor_json_into_a_closed_pipe_ends_quietly(node, extra):
    process = subprocess.Popen([str(BIN / "pzq-monitor"), "--json", "--dsn", node.monitor_dsn,
                                *extra], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    process.stdout.close()  # as head -1 does once it has its line: no reader is left
    _, stderr = process.communicate(timeout=20)
    assert (process.returncode, stderr) == (0, "")


# -- 8. the live view shows topics and groups too ----------------------------------------

def test_monitor_watch_shows_the_topics_and_groups_table(node):
    declared = tool("pzq-ctl", "--dsn", node.monitor_dsn, "topic", "declare", "orders")
    assert declared.returncode == 0, declared.stderr
    shown = tool("pzq-monitor", "--dsn", node.monitor_dsn, "--watch", "--iterations", "1")
    assert shown.returncode == 0, shown.stderr
    assert "topics and groups" in shown.stdout
    assert any("orders" in line for line in shown.stdout.splitlines())


# -- 9. pzq-consume's numbers and start position -------------------------------------------

@pytest.mark.parametrize("option, value, reason", [
    ("--window", "0", "0: give a whole number from 1 to 100000"),
    ("--window", "many", "many is not a whole number"),
    ("--count", "-1", "-1: give a whole number 0 or more"),
    ("--start", "yesterday", "yesterday is not earliest, latest or a time (ISO 8601, e.g. "
                             "2026-12-01T09:00:00Z, or µs since the epoch)"),
])
def test_consume_refuses_a_bad_value_before_it_connects(tmp_path, option, value, reason):
    result = tool("pzq-consume", "--dsn", f"ipc://{tmp_path}/no-node", "--topic", "t",
                  "--group", "g", "--timeout", "2", option, value)
    assert result.returncode == 2
    assert one_line(result.stderr) == f"pzq-consume: error: argument {option}: {reason}"


# -- 10. a declare that names another filter -----------------------------------------------

def test_declaring_a_group_again_with_another_filter_names_the_real_one(start_node):
    node = start_node(consume=True)

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return tool("pzq-ctl", "--dsn", node.monitor_dsn, *args)

    assert ctl("topic", "declare", "orders").returncode == 0
    assert ctl("group", "declare", "orders", "eu", "--filter", "eu-*").returncode == 0
    same = ctl("group", "declare", "orders", "eu", "--filter", "eu-*")
    assert (same.returncode, same.stdout) == (0, "group eu of topic orders exists already\n")
    other = ctl("group", "declare", "orders", "eu", "--filter", "us")
    assert other.returncode == 1
    assert one_line(other.stderr) == ("pzq-ctl: ERROR: group eu of topic orders exists with "
                                      "the filter eu-*, not us; remove the group to declare "
                                      "it anew")


# -- 11. purge or requeue of a key that is no dead letter ----------------------------------

def test_purge_of_a_key_that_is_no_dead_letter_says_so(node, context):
    from pzq.client import Consumer, Producer
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"alive"]).ok
    with Consumer(node.send_dsn, context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None
        key = message.key.decode()
        for verb in ("purge", "requeue"):  # stored and in flight, not a dead letter
            refused = tool("pzq-ctl", "--dsn", node.monitor_dsn, verb, key)
            assert refused.returncode == 1
            assert one_line(refused.stderr) == f"pzq-ctl: ERROR: no dead letter {key}"
        message.ack()
    node.wait_figures(lambda f: f["messages"] == 0, message="the message acked")
    gone = tool("pzq-ctl", "--dsn", node.monitor_dsn, "purge", key)
    assert (gone.returncode, gone.stderr.strip()) == (1, f"pzq-ctl: ERROR: no dead letter {key}")
    assert tool("pzq-ctl", "--dsn", node.monitor_dsn, "purge", "ALL").stdout == "purged: 0\n"


# -- 12. the node options after the command ------------------------------------------------

def test_ctl_takes_the_node_options_after_the_command_too(node):
    after = tool("pzq-ctl", "pending", "--dsn", node.monitor_dsn, "--timeout", "5")
    assert after.returncode == 0, after.stderr
    assert after.stdout.startswith("messages: 0\n")
    declared = tool("pzq-ctl", "topic", "declare", "orders", "--dsn", node.monitor_dsn)
    assert (declared.returncode, declared.stdout) == (0, "topic orders\n")


# -- 13. a peer never reached ---------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_peer_never_reached_is_logged_once_the_start_grace_is_over(start_node):
    peer = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    node = start_node("--broadcast-dsn", f"tcp://127.0.0.1:{free_port()}", "--nodes", peer,
                      "--replicas", "1", "--timeout-nodes", "500ms")
    said = wait_until(lambda: node.event("peer_never_reached"), 15,
                      message="peer_never_reached in the log")
    assert said["endpoint"] == peer and said["level"] == "warning"


def test_a_peer_host_that_does_not_resolve_is_a_warning_at_start(start_node):
    """It was only peer_never_reached; a literal address is not looked up (RFC 2606:
    no name under .invalid resolves)."""
    unresolved, literal = "tcp://pzq-peer.invalid:11134", f"tcp://127.0.0.1:{free_port()}"
    node = start_node("--broadcast-dsn", f"tcp://127.0.0.1:{free_port()}", "--nodes",
                      f"{unresolved},{literal}", "--timeout-nodes", "500ms")
    said = wait_until(lambda: node.event("peer_host_unresolved"), 15,
                      message="peer_host_unresolved in the log")
    assert (said["level"], said["endpoint"], said["host"]) == (
        "warning", unresolved, "pzq-peer.invalid")
    assert said["reason"].startswith("it does not resolve (")
    assert node.stats()["uptime_seconds"] >= 0  # a warning: the node runs
    assert [event["endpoint"] for event in list(node.events)
            if event.get("event") == "peer_host_unresolved"] == [unresolved]


def test_a_peer_listed_by_another_name_is_a_warning_once_not_silent_replication_failed(
        start_node, context):
    """B lists A as localhost, A names itself 127.0.0.1: B refuses A's frames, and A's
    ACKs say REPLICATION_FAILED with both nodes running; B says why, once a minute."""
    from pzq.client import Producer
    port_a, port_b = free_port(), free_port()
    a = start_node("--broadcast-dsn", f"tcp://127.0.0.1:{port_a}", "--nodes",
                   f"tcp://127.0.0.1:{port_b}", "--replicas", "1", "--timeout-nodes", "500ms")
    b = start_node("--broadcast-dsn", f"tcp://127.0.0.1:{port_b}", "--nodes",
                   f"tcp://localhost:{port_a}", "--timeout-nodes", "500ms")
    said = wait_until(lambda: b.event("ping_from_stranger"), 15,
                      message="ping_from_stranger in B's log")
    assert said["level"] == "warning" and said["endpoint"] == f"tcp://127.0.0.1:{port_a}"
    assert said["nodes"] == f"tcp://localhost:{port_a}"
    assert said["node_id"] == a.event("node_ready")["node_id"]
    with Producer(a.receive_dsn, context=context) as producer:
        assert producer.produce([b"x"]).replication_failed  # what the warning explains
    wait_until(lambda: b.stats()["cluster_rejected"] >= 4, 15,  # A pings on...
               message="more of A's PINGs refused")
    assert sum(event.get("event") == "ping_from_stranger" for event in b.events) == 1


def test_nodes_listing_a_peers_producer_endpoint_is_a_warning_at_its_first_answer(start_node):
    """The original pzq's --nodes took the peers' --receive-dsn: carried over, this
    node's link reaches a producer endpoint, which answers each frame with an ACK 0.
    It was only peer_never_reached after --timeout-nodes, with no reason."""
    peer = start_node()
    node = start_node("--broadcast-dsn", f"tcp://127.0.0.1:{free_port()}", "--nodes",
                      peer.receive_dsn, "--replicas", "1", "--timeout-nodes", "500ms")
    said = wait_until(lambda: node.event("peer_not_a_cluster_endpoint"), 15,
                      message="peer_not_a_cluster_endpoint in the log")
    assert (said["level"], said["endpoint"]) == ("warning", peer.receive_dsn)
    assert said["reason"].startswith("it answers as a producer endpoint (--receive-dsn)")
    assert "the original pzq's --nodes took their --receive-dsn" in said["reason"]
    never = wait_until(lambda: node.event("peer_never_reached"), 15,
                       message="peer_never_reached in the log")
    assert never["reason"] == said["reason"]
    wait_until(lambda: node.stats()["cluster_rejected"] >= 3, 15, message="more answers")
    assert sum(event.get("event") == "peer_not_a_cluster_endpoint"
               for event in node.events) == 1


def test_nodes_that_list_this_node_under_another_name_are_said_so(start_node, context):
    """--nodes tcp://localhost:P on the node whose --broadcast-dsn is tcp://127.0.0.1:P:
    its own PINGs come back refused. It was ping_from_stranger with this node's own id,
    as if another node were misconfigured."""
    from pzq.client import Producer
    port = free_port()
    node = start_node("--broadcast-dsn", f"tcp://127.0.0.1:{port}", "--nodes",
                      f"tcp://localhost:{port}", "--replicas", "1", "--timeout-nodes", "500ms")
    said = wait_until(lambda: node.event("nodes_list_this_node"), 15,
                      message="nodes_list_this_node in the log")
    assert said["level"] == "warning" and said["endpoint"] == f"tcp://127.0.0.1:{port}"
    assert said["nodes"] == f"tcp://localhost:{port}"
    assert node.event("ping_from_stranger") is None
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"x"]).replication_failed  # what the warning explains


def test_a_peer_never_reached_is_said_again_at_intervals_not_at_every_heartbeat():
    peers = PeerTable(("tcp://a:1", "tcp://b:1"), timeout_nodes_s=10.0, now=100.0)
    assert peers.never_reached(105.0) == []  # the start's grace: nobody is late yet
    peers.heard("tcp://b:1", b"b", 106.0)
    assert [peer.endpoint for peer in peers.never_reached(111.0)] == ["tcp://a:1"]
    assert peers.never_reached(112.0) == []
    assert peers.never_reached(111.0 + UNREACHED_REPEAT_S - 1) == []
    assert [peer.endpoint for peer in peers.never_reached(111.0 + UNREACHED_REPEAT_S)] \
        == ["tcp://a:1"]
    peers.heard("tcp://a:1", b"a", 200.0)
    assert peers.never_reached(500.0) == []


# -- 15. cells the benchmark did not measure ------------------------------------------------

def test_bench_table_leaves_unmeasured_cells_empty(capsys):
    from pzq.bench.measure import Figure
    from pzq.bench.report import print_table
    print_table([Figure("drain 100 B", "pzq", 5000.0, ratio=0.5),
                 Figure("produce 100 B window 1", "pzq", 900.0, 1.25, 3.5, 41.0, 0.8)])
    header, drain, produce = capsys.readouterr().out.splitlines()
    assert drain.split() == ["drain", "100", "B", "pzq", "5000", "0.50"]
    assert produce.split()[-5:] == ["900", "1.25", "3.50", "41", "0.80"]


# -- 17. the report script's --help ----------------------------------------------------------

def test_archive_report_help_says_whole_sentences():
    script = Path(__file__).parents[2] / "scripts" / "archive_report.py"
    shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                           text=True, timeout=30, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "latency (stored -> acked) percentiles and redeliveries." in shown.stdout
    assert "--once reads what is there and stops." in shown.stdout



@pytest.mark.parametrize("trigger", ["-1", "0", "soon"])
def test_archive_report_refuses_a_trigger_not_above_0_before_spark(tmp_path, trigger):
    """--stream --trigger -1 started Spark and ended in its IllegalArgumentException's
    traceback (exit 1): a usage error, one line, exit 2, before Spark starts."""
    script = Path(__file__).parents[2] / "scripts" / "archive_report.py"
    shown = subprocess.run([sys.executable, str(script), "--stream", "--trigger", trigger,
                            "--archive", str(tmp_path), "--out", str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.splitlines()[-1].startswith(
        f"archive_report: error: argument --trigger: {trigger}"), shown.stderr
    assert "Traceback" not in shown.stderr


def test_archive_report_refuses_a_master_spark_cannot_start_with(tmp_path):
    """--master nowhere ended in PySpark's JAVA_GATEWAY_EXITED traceback (exit 1): a
    usage error, one line, exit 2, before Spark starts."""
    script = Path(__file__).parents[2] / "scripts" / "archive_report.py"
    shown = subprocess.run([sys.executable, str(script), "--master", "nowhere",
                            "--archive", str(tmp_path), "--out", str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.splitlines()[-1].startswith(
        "archive_report: error: argument --master: 'nowhere' is not a Spark master"), \
        shown.stderr
    assert "Traceback" not in shown.stderr


@pytest.mark.parametrize("stream", [[], ["--stream", "--once"]])
def test_archive_report_refuses_an_out_that_is_a_file_before_spark(tmp_path, stream):
    """--out naming a file ended, after Spark had started, in a FileExistsError
    traceback (exit 1): a usage error, one line, exit 2, before Spark starts."""
    script = Path(__file__).parents[2] / "scripts" / "archive_report.py"
    taken = tmp_path / "report.txt"
    taken.write_text("mine\n")
    archive = tmp_path / "archive"  # an archive, empty: the --out check is the one seen
    archive.mkdir()
    shown = subprocess.run([sys.executable, str(script), *stream, "--archive", str(archive),
                            "--out", str(taken)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.splitlines()[-1] == (
        f"archive_report: error: --out {taken} is a file: give a directory for the report")
    assert taken.read_text() == "mine\n"

# -- 19. FETCH's frame widths, as the docs give them ----------------------------------------

def test_docs_give_fetch_frame_widths_that_a_node_takes(archived_node, open_socket):
    import zmq

    from pzq.protocol import zper as zp
    root = Path(__file__).parents[2]
    docs = "\n".join(path.read_text() for path in
                     [root / "README.rst", *sorted((root / "docs").glob("*.rst"))])
    assert ("both ``FETCH`` frames\n(*offset* and *max bytes*) are 8 bytes wide"
            in docs)
    reader = open_socket(zmq.DEALER)
    reader.setsockopt(zmq.IDENTITY, zp.make_identity("default"))
    reader.connect(archived_node.archive_dsn)
    answers = []
    for max_bytes in (zp.INT64.pack(1 << 20), zp.INT32.pack(1 << 20)):
        reader.send_multipart([b"FETCH", zp.INT64.pack(0), max_bytes])
        assert reader.poll(10_000), "no answer to FETCH"
        answers.append(reader.recv_multipart()[0])
    assert answers[1] == bytes([zp.INVALID_COMMAND])
    assert answers[0] != bytes([zp.INVALID_COMMAND])


# -- 20. a --database folder that holds other things ------------------------------------------

def test_a_database_folder_with_other_content_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    result = run_pzq(["--database", str(folder), *LOOPBACK], timeout=10)
    assert result.returncode == 3
    assert one_line(result.stderr) == (
        f"pzq: error: --database {folder} holds other files and no pzq store (notes.txt): "
        "give a new or empty directory, or the directory of a store")
    assert sorted(path.name for path in folder.iterdir()) == ["notes.txt"]


def test_an_empty_folder_a_fresh_mount_and_a_store_are_taken(start_node, tmp_path):
    mounted = tmp_path / "disk"
    (mounted / "lost+found").mkdir(parents=True)
    node = start_node(database=mounted)
    node.stop()
    start_node(database=mounted)  # a store now, with lost+found beside it


# -- 21. local-cluster's node numbers and replica count ---------------------------------------

@pytest.mark.parametrize("args, line", [
    (("kill", "5"), "local-cluster: there is no node '5': the nodes are 0, 1 and 2"),
    (("restart", "-1"), "local-cluster: there is no node '-1': the nodes are 0, 1 and 2"),
    (("start", "5"), "local-cluster: REPLICAS must be 0, 1 or 2 (copies on the other two "
                     "nodes), not '5'"),
])
def test_local_cluster_refuses_a_node_it_does_not_have_before_anything_starts(tmp_path, args,
                                                                               line):
    script = Path(__file__).parents[2] / "scripts" / "local-cluster"
    env = {**os.environ, "PZQ_CLUSTER_DIR": str(tmp_path / "cluster"), "PZQ_VENV": sys.prefix,
           "PZQ_CLUSTER_BASE_PORT": "12000", "PZQ_CLUSTER_START_TIMEOUT": "5"}
    result = subprocess.run([str(script), *args], env=env, capture_output=True, text=True,
                            timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert (result.returncode, one_line(result.stderr)) == (2, line)
    assert not (tmp_path / "cluster").exists()  # nothing started, nothing written


# -- 22. an empty monitor command ------------------------------------------------------------

@pytest.mark.parametrize("command", ["", "  "])
def test_monitor_refuses_an_empty_command(tmp_path, command):
    result = tool("pzq-monitor", "--dsn", f"ipc://{tmp_path}/no-node", "--timeout", "1",
                  "--command", command)
    assert result.returncode == 2
    assert one_line(result.stderr) == ("pzq-monitor: error: argument --command: give a "
                                       "command, e.g. MONITOR, STATS or PING")


# -- 18. one environment for start-node and run-tests; --help first --------------------------

ROOT = Path(__file__).parents[2]


def test_ensure_env_for_start_node_keeps_the_test_environment_as_it_is():
    stamp = Path(sys.prefix) / ".pzq-installed"
    before = stamp.read_text() if stamp.exists() else None  # a venv made without the script
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp.write_text(f"{digest} test\n")  # as scripts/run-tests leaves it
    try:
        started = subprocess.run([str(ROOT / "scripts" / "ensure-env")], capture_output=True,
                                 text=True, timeout=120, check=False,
                                 env={**os.environ, "PZQ_VENV": sys.prefix})
        assert (started.returncode, started.stderr) == (0, "")
        assert stamp.read_text() == f"{digest} test\n"  # run-tests will not install again
    finally:
        if before is None:
            stamp.unlink()
        else:
            stamp.write_text(before)


def test_run_tests_help_comes_before_the_system_package_check(tmp_path):
    tools = tmp_path / "bin"  # what the script needs, and no java, chromium or apt-get
    tools.mkdir()
    for name in ("bash", "dirname", "sha256sum", "cut", "cat", "sort", "paste"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    shown = subprocess.run([str(ROOT / "scripts" / "run-tests"), "--help"], capture_output=True,
                           text=True, timeout=60, check=False,
                           env={**os.environ, "PATH": str(tools), "PZQ_VENV": sys.prefix})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage:") and "installing" not in shown.stderr


# -- 16. zper.ack.subscriptions counts what is subscribed now ---------------------------------

def test_zper_ack_subscriptions_count_what_is_subscribed_after_garbage_and_a_close(
        start_node, tmp_path, open_socket):
    import zmq
    node = start_node("--archive-dir", str(tmp_path / "archive"),
                      "--zper-ack-dsn", "tcp://127.0.0.1:*")
    ack_dsn = node.event("node_ready")["zper_ack"]

    def subscriptions_become(count: int) -> None:
        node.wait_stats(lambda s: s["zper"]["ack"]["subscriptions"] == count,
                        message=f"{count} subscriptions")

    raw = open_socket(zmq.XSUB)
    raw.connect(ack_dsn)
    for frame in (b"\x01abc", b"\x01abc", b"\x07junk", b"", b"\x01sync"):
        raw.send(frame)  # a subscription twice, and frames that are none
    subscriptions_become(2)  # abc and sync
    subscriber = open_socket(zmq.SUB)
    subscriber.subscribe(b"metrics")
    subscriber.connect(ack_dsn)
    subscriptions_become(3)
    raw.close(0)  # its subscriptions go with it
    subscriptions_become(1)
    assert node.stats()["zper"]["ack"]["subscriptions"] == 1


def test_monitor_says_what_it_waits_for_when_nothing_answers(tmp_path):
    nowhere = f"ipc://{tmp_path}/no-node"
    line, elapsed = first_stderr_line_while_waiting(
        [str(BIN / "pzq-monitor"), "--dsn", nowhere, "--timeout", "25"])
    assert line == (f"pzq-monitor: no answer yet from {nowhere}: nothing answers there (is "
                    "the node running?); waiting up to 25 s")
    assert elapsed < 20
