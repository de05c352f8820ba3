"""STATS, pzq-monitor, the Prometheus exporter and the status page against real nodes
(in this process, on loopback ports of their own: what runs as a process here is the
exporter, the browser)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from pzq.cli import monitor as monitor_cli
from pzq.client import Consumer, GroupConsumer, Producer, request_monitor
from pzq.client.monitor import StatsAnswer
from pzq.monitoring import exporter
from pzq.monitoring.history import NodeHistory
from pzq.monitoring.scrape import Scraper
from pzq.monitoring.server import status_page
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).parents[2]
# No process answers here: a socket path nobody binds, not a port someone might use.
DEAD_DSN = "ipc:///nonexistent/pzq-test/dead-node"


@pytest.fixture
def node(inproc_node):
    return inproc_node


def scripted_run(node, context) -> None:
    """20 produced; 12 acked, 3 given back (then acked), 5 left to expire."""
    with Producer(node.receive_dsn, context=context) as producer:
        for i in range(20):
            producer.send([b"%d" % i])
        producer.flush(15)
    with Consumer(node.send_dsn, context=context) as consumer:
        for i in range(20):
            message = consumer.receive(10)
            if i < 12:
                message.ack()
            elif i < 15:
                message.nack()
        node.wait_figures(lambda f: f["expired_messages"] >= 5 and f["nacked"] == 3,
                          message="expiries and nacks counted")


def test_stats_match_a_scripted_run(node, context):
    scripted_run(node, context)
    stats = node.stats()
    assert (stats["received"], stats["stored"], stats["acked"], stats["nacked"]) == (20, 20, 12, 3)
    assert stats["expired"] >= 5 and stats["messages"] == 8
    assert stats["producer_acks"] == {"ok": 20, "failed": 0, "replication_failed": 0}
    assert stats["ack_latency_ms"]["samples"] == 12
    assert stats["rates"]["received_60s"] > 0
    assert stats["version"] and stats["node_id"] and stats["uptime_seconds"] > 0


def test_monitor_text_keeps_the_original_keys_first(node):
    lines = request_monitor(node.monitor_dsn, "MONITOR").decode().splitlines()
    assert [line.split(":")[0] for line in lines[:6]] == [
        "messages", "messages_inflight", "db_size", "inflight_db_size", "syncs",
        "expired_messages"]


def test_pzq_monitor_once_json_and_check(node, capsys):
    assert monitor_cli.main(["--dsn", node.monitor_dsn]) == 0
    shown = capsys.readouterr().out
    assert node.stats()["node_id"] in shown
    # The delivery figures say they are --send-dsn's: a group's are in its own row.
    assert re.search(r"│ in flight \(--send-dsn\) +│ +\d+ │", shown), shown
    assert re.search(r"│ acked/s \(--send-dsn\) \(1 s, 60 s\) +│", shown), shown
    assert re.search(r"│ received +│ +\d+ │", shown), shown
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["node_id"] == node.stats()["node_id"]
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) == 0
    assert "healthy" in capsys.readouterr().out
    assert monitor_cli.main(["--dsn", DEAD_DSN, "--check", "--timeout", "0.5"]) == \
        monitor_cli.EXIT_NO_ANSWER
    assert "unhealthy: no answer" in capsys.readouterr().err
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--dsn", DEAD_DSN, "--watch",
                             "--iterations", "2", "--interval", "0.1", "--timeout", "0.3"]) == \
        monitor_cli.EXIT_NO_ANSWER  # as --check: the last look found a node down (was 0)
    watched = capsys.readouterr().out
    assert "DOWN" in watched and "nothing answers there" in watched
    for shown in ([], ["--json"]):
        assert monitor_cli.main(["--dsn", DEAD_DSN, "--watch", *shown, "--iterations", "1",
                                 "--timeout", "0.3"]) == monitor_cli.EXIT_NO_ANSWER
        assert monitor_cli.main(["--dsn", node.monitor_dsn, "--watch", *shown,
                                 "--iterations", "1"]) == 0
    capsys.readouterr()


def test_check_reports_an_unhealthy_node():
    before = {"store_failures": 0, "peers": []}
    now = {"store_failures": 3, "pending_producer_acks": 50_000,
           "peers": [{"endpoint": "tcp://b:1", "state": "down"},
                     {"endpoint": "tcp://c:1", "state": "unreachable"},
                     {"endpoint": "tcp://d:1", "state": "up"},
                     {"endpoint": "tcp://e:1", "state": "left"}]}
    problems = monitor_cli.health_problems(before, now, max_pending_acks=10_000)
    assert problems == ["store writes are failing", "50000 producer ACKs cannot be sent",
                        "peer down: tcp://b:1", "peer left (stopped by SIGTERM): tcp://e:1",
                        "peer unreachable: tcp://c:1"]
    # for how long, rounded as every figure for people (and as the status page says it)
    failing = {"store_write_failing": 1, "store_write_failing_s": 194.134, "peers": []}
    assert monitor_cli.health_problems(before, failing, max_pending_acks=10_000) == [
        "store writes are failing (for 3 min 14 s)"]


def serve_beside_a_dead_node(monitor_dsn: str) -> Iterator[str]:
    """An exporter for the node and a node that is down, sampling every 0.2 s."""
    running = exporter.serve([monitor_dsn, DEAD_DSN], "127.0.0.1", 0, timeout=0.5,
                             sample_interval=0.2)
    yield f"http://127.0.0.1:{running.port}"
    running.stop()


@pytest.fixture
def served(node):
    yield from serve_beside_a_dead_node(node.monitor_dsn)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_exporter_metrics_against_a_real_node_and_a_dead_one(node, context, served):
    scripted_run(node, context)
    metrics = get(served + "/metrics")
    node_id = node.stats()["node_id"]
    mine = f'monitor="{node.monitor_dsn}",node="{node_id}"'
    assert f"pzq_up{{{mine}}} 1.0" in metrics
    # a node that never answered is named by its endpoint (PzqNodeDown named no node)
    assert f'pzq_up{{monitor="{DEAD_DSN}",node="{DEAD_DSN}"}} 0.0' in metrics
    assert f"pzq_received_total{{{mine}}} 20.0" in metrics
    assert f'pzq_acks_total{{{mine},outcome="acked"}} 12.0' in metrics
    assert f'pzq_acks_total{{{mine},outcome="nacked"}} 3.0' in metrics
    assert re.search(rf"pzq_expired_total{{{mine}}} ([5-9]|\d\d)\.0", metrics)
    assert f"pzq_evicted_total{{{mine}}} 0.0" in metrics
    assert f"pzq_messages_stored{{{mine}}} 8.0" in metrics
    assert f'pzq_producer_acks_total{{{mine},outcome="ok"}} 20.0' in metrics
    assert f"pzq_queue_full_total{{{mine}}} 0.0" in metrics
    assert f"pzq_archived_total{{{mine}}} 0.0" in metrics
    assert f"pzq_archive_failures_total{{{mine}}} 0.0" in metrics
    assert "# TYPE pzq_ack_latency_seconds histogram" in metrics
    assert f'pzq_ack_latency_seconds_bucket{{le="+Inf",{mine}}} 12.0' in metrics
    assert f"pzq_ack_latency_seconds_count{{{mine}}} 12.0" in metrics
    assert "quantile=" not in metrics
    # the exposition format's order: buckets by increasing le, counts cumulative
    buckets = re.findall(rf'pzq_ack_latency_seconds_bucket{{le="([^"]+)",{re.escape(mine)}}} '
                         r"(\S+)", metrics)
    bounds = [float(bound) for bound, _ in buckets]
    assert len(bounds) > 2 and bounds == sorted(bounds) and bounds[-1] == float("inf")
    counts = [float(count) for _, count in buckets]
    assert counts == sorted(counts)
    answers = json.loads(get(served + "/api/stats"))
    assert answers[DEAD_DSN]["up"] is False and "nothing answers" in answers[DEAD_DSN]["error"]
    assert answers[node.monitor_dsn]["acked"] == 12


def test_archive_and_queue_full_are_exported(start_inproc_node, context, tmp_path):
    node = start_inproc_node("--archive-dir", str(tmp_path / "archive"), "--max-messages", "2",
                             consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        refused = [producer.produce([b"%d" % i]) for i in range(3)]
    assert [ack.ok for ack in refused] == [True, True, False]
    with Consumer(node.send_dsn, context=context) as consumer:
        for _ in range(2):
            consumer.receive(10).ack()
    node.wait_stats(lambda s: s["archive"]["archived"] == 2, message="two archived")
    running = exporter.serve([node.monitor_dsn], "127.0.0.1", 0, timeout=2)
    try:
        metrics = get(f"http://127.0.0.1:{running.port}/metrics")
    finally:
        running.stop()
    labels = f'monitor="{node.monitor_dsn}",node="{node.stats()["node_id"]}"'
    assert f"pzq_queue_full_total{{{labels}}} 1.0" in metrics
    assert f"pzq_archived_total{{{labels}}} 2.0" in metrics


def test_down_nodes_are_scraped_in_parallel(tmp_path):
    dead = [f"ipc://{tmp_path}/dead-{n}" for n in range(3)]
    running = exporter.serve(dead, "127.0.0.1", 0, timeout=1.0, sample_interval=60)
    try:
        started = time.monotonic()
        metrics = get(f"http://127.0.0.1:{running.port}/metrics")
        took = time.monotonic() - started
    finally:
        running.stop()
    assert metrics.count("pzq_up{") == 3
    assert took < 2.0  # one timeout, not three


def test_a_scrape_waits_for_nodes_within_the_deadline_prometheus_gives(node):
    """Prometheus gives up on a scrape after its scrape_timeout and then counts every
    node's series gone: a node that is down must cost less than that, so it is pzq_up 0
    and the other nodes are still there."""
    running = exporter.serve([node.monitor_dsn, DEAD_DSN], "127.0.0.1", 0, timeout=4.0,
                             sample_interval=60)
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{running.port}/metrics",
            headers={"X-Prometheus-Scrape-Timeout-Seconds": "1.5"})
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=10) as response:
            metrics = response.read().decode()
        took = time.monotonic() - started
        started = time.monotonic()
        get(f"http://127.0.0.1:{running.port}/metrics")  # no header: --timeout
        took_plain = time.monotonic() - started
    finally:
        running.stop()
    assert took < 1.5, took
    assert took_plain >= 4.0, took_plain
    assert f'pzq_up{{monitor="{DEAD_DSN}",node="{DEAD_DSN}"}} 0.0' in metrics
    assert re.search(rf'pzq_up{{monitor="{re.escape(node.monitor_dsn)}",node="\w+"}} 1\.0',
                     metrics)


def test_the_exporter_says_once_why_a_node_does_not_answer(node, capfd):
    """pzq_up 0 says nothing of why: the exporter's log says it, once per change."""
    running = exporter.serve([node.monitor_dsn, DEAD_DSN], "127.0.0.1", 0, timeout=0.5,
                             sample_interval=60)
    try:
        for _ in range(3):
            get(f"http://127.0.0.1:{running.port}/metrics")
    finally:
        running.stop()
    lines = capfd.readouterr().err.splitlines()
    assert lines == [f"pzq-exporter: {DEAD_DSN} does not answer: no answer from {DEAD_DSN} "
                     "within 0.5 s: nothing answers there (is the node running?)"]


def test_a_node_is_told_down_and_up_again_by_its_id():
    from pzq.monitoring.node_states import NodeStates

    told: list[str] = []
    states = NodeStates(told.append)
    up, down = StatsAnswer("tcp://n:1", {"node_id": "ab"}), StatsAnswer("tcp://n:1", None, "why")
    for answer in (up, up, down, down, up, up):
        states.note(answer, "ab")
    assert told == ["node ab (tcp://n:1) does not answer: why", "node ab (tcp://n:1) answers again"]


def test_a_scrape_deadline_is_the_timeout_less_a_margin():
    from email.message import Message

    from pzq.monitoring.server import scrape_timeout

    def told(value: str | None) -> float:
        headers = Message()
        if value is not None:
            headers["X-Prometheus-Scrape-Timeout-Seconds"] = value
        return scrape_timeout(headers, 2.0)

    assert told(None) == 2.0 and told("10") == 2.0  # Prometheus' default 10 s: --timeout
    assert told("2") == 1.5 and told("1") == 0.75  # less half a second, or a quarter
    assert told("nonsense") == told("0") == told("-1") == told("nan") == 2.0


def test_a_scraper_closed_as_the_history_samples_asks_no_node_and_raises_nothing(tmp_path):
    """The history's thread may begin a sample as the exporter stops: once closed,
    the scraper answers with nothing instead of scheduling on a pool shut down."""
    scraper = Scraper([f"ipc://{tmp_path}/dead"], timeout=1.0)
    scraper.close()
    assert list(scraper.scrape_each()) == []


def exporter_process(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    # PYTHONFAULTHANDLER: a SIGABRT makes a hung exporter print every thread's stack.
    return subprocess.Popen([str(Path(sys.executable).parent / "pzq-exporter"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"}, **kwargs)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job


@pytest.mark.parametrize("signum, started", [(signal.SIGTERM, "plainly"),
                                             (signal.SIGINT, "plainly"),
                                             (signal.SIGINT, "as a background job")])
def test_the_exporter_stops_on_sigterm_or_sigint(signum, started):
    # Its first sample of the dead node starts before the line below and waits up to
    # --timeout: the stop must not wait for it.
    process = exporter_process("--dsn", DEAD_DSN, "--listen", "127.0.0.1:0", "--timeout", "10",
                               preexec_fn=_ignore_sigint if started != "plainly" else None)
    assert "serving http://" in process.stdout.readline()
    process.send_signal(signum)
    signalled = time.monotonic()
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"the exporter did not stop on {signal.Signals(signum).name}")
    took = time.monotonic() - signalled
    assert process.returncode == 0 and err == ""
    # About 0.2 s on an idle machine, most of it Python's exit (a loaded one takes
    # seconds to exit); waiting out the sample took the whole --timeout, 10 s.
    assert took < 3.0, f"{took:.2f} s to stop"


def test_a_listen_port_out_of_range_says_so():
    with pytest.raises(argparse.ArgumentTypeError, match=r"^127.0.0.1:99999: port 99999 is "
                                                          r"out of range \(0 to 65535\)$"):
        exporter.listen_address("127.0.0.1:99999")
    with pytest.raises(argparse.ArgumentTypeError, match="is not HOST:PORT"):
        exporter.listen_address("127.0.0.1:http")


def test_a_history_of_no_minutes_is_refused_in_minutes():
    """--history-minutes -1 was refused as "a number of seconds"."""
    process = exporter_process("--dsn", DEAD_DSN, "--history-minutes", "-1")
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert err.strip() == ("pzq-exporter: error: argument --history-minutes: -1: give a "
                           "number of minutes greater than 0")


def test_exporter_on_a_port_in_use_is_one_line_and_exit_4():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = exporter_process("--dsn", DEAD_DSN, "--listen", f"127.0.0.1:{port}")
        _, err = process.communicate(timeout=30)
    assert process.returncode == 4
    assert err.strip() == (f"pzq-exporter: error: cannot listen on 127.0.0.1:{port}: "
                           "Address already in use")


def test_browsers_that_hang_up_mid_answer_are_no_error(node):
    process = exporter_process("--dsn", node.monitor_dsn, "--listen", "127.0.0.1:0")
    try:
        port = int(re.search(r":(\d+)/", process.stdout.readline()).group(1))
        for path in ("/", "/metrics", "/api/stats", "/api/history") * 5:
            hang_up_mid_answer(port, path)
        assert "pzq_up{" in get(f"http://127.0.0.1:{port}/metrics")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # every thread's stack, by faulthandler
            pytest.fail("the exporter did not stop:\n" + process.communicate(timeout=10)[1])
    assert process.returncode == 0
    assert "Traceback" not in err and err == "", err


def hang_up_mid_answer(port: int, path: str) -> None:
    """Ask, read the first bytes of the answer, then reset the connection."""
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: pzq\r\n\r\n".encode())
    client.recv(16)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def test_exporter_says_which_extra_it_needs(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # how Python hides a module
    assert exporter.main(["--dsn", DEAD_DSN]) == 2
    assert capsys.readouterr().err == ("pzq-exporter: error: needs prometheus-client: "
                                       "pip install 'pzq[monitoring]'\n")


def test_python_m_monitoring_exporter_still_works():
    result = subprocess.run([sys.executable, "-m", "monitoring.exporter", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0 and "pzq-exporter" in result.stdout


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def group_node(start_inproc_node, tmp_path):
    """A node with the consume endpoint and a ZPER writer endpoint, as well as the
    original ones; a consumer that sends nothing for a while is not counted gone."""
    return start_inproc_node("--ack-timeout", "1000000", "--reaper-frequency", "100000",
                             "--archive-dir", str(tmp_path / "archive"), "--zper-writer-dsn",
                             "tcp://127.0.0.1:*", "--consume-heartbeat", "30s", tcp=True)


def group_run(node, context) -> GroupConsumer:
    """3 messages to the topic orders; the group billing acks 2 and holds 1."""
    with Producer(node.receive_dsn, context=context) as producer:
        for i in range(3):
            producer.send([b"o%d" % i], topic="orders")
        assert all(ack.ok for ack in producer.flush(15))
    consumer = GroupConsumer(node.consume_dsn, "orders", "billing", window=5, context=context)
    for _ in range(2):
        consumer.receive(10).ack()
    assert consumer.receive(10) is not None  # held unacked
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["acked"] == 2,
                    message="billing acked two")
    return consumer


@pytest.fixture
def served_groups(group_node):
    yield from serve_beside_a_dead_node(group_node.monitor_dsn)


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_status_page_in_a_real_browser(group_node, context, served_groups, tmp_path):
    node, served = group_node, served_groups
    scripted_run(node, context)
    billing = group_run(node, context)
    assert "partitions=2" in node.ask("DECLARE TOPIC payments partitions=2")
    wait_until(lambda: len(history_of(served, node.monitor_dsn)["points"]) >= 10, 20,
               message="ten samples of history")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=1000",
             "--window-size=1200,1100"]
    dom = subprocess.run([chromium(), *flags, "--dump-dom", served + "/"], capture_output=True,
                         text=True, timeout=60, check=False).stdout
    node_id = node.stats()["node_id"]
    live = card_of(dom, node.monitor_dsn)
    assert f"node {node_id}" in live and "UP" in live
    assert 'data-key="acked"><div class="value">12</div>' in live
    uptime = re.search(r'data-key="uptime_seconds"><div class="value">([^<]+)<', live).group(1)
    assert re.fullmatch(r"\d+\.\d s|\d+ min( \d+ s)?", uptime), uptime
    # The first render already has the minutes sampled before the page was opened.
    charts = {kind: (unit, int(points)) for kind, unit, points in re.findall(
        r'<canvas data-chart="(\w+)" data-unit="([^"]+)"[^>]*data-points="(\d+)"', live)}
    assert charts["backlog"][0] == "messages" and charts["flow"][0] == "messages/s"
    assert charts["backlog"][1] >= 10 and charts["flow"][1] >= 10
    assert float(re.search(r'data-chart="flow"[^>]*data-y-max="([\d.]+)"', live).group(1)) > 0
    down = card_of(dom, DEAD_DSN)
    assert "DOWN since " in down and "nothing answers there (is the node running?)" in down
    shot = tmp_path / "status.png"
    subprocess.run([chromium(), *flags, f"--screenshot={shot}", served + "/"],
                   capture_output=True, timeout=60, check=False)
    assert shot.stat().st_size > 10_000
    billing.close()
    topics = re.search(r'<table class="topics[^"]*" data-key="topics">(.*?)</table>', live).group(1)
    rows = {(topic, group): dict(re.findall(r'<td data-column="([^"]+)">([^<]*)</td>', row))
            for topic, group, row in re.findall(
                r'<tr data-topic="([^"]+)" data-group="([^"]+)">(.*?)</tr>', topics)}
    assert ">payments p0,1/2<" in topics  # a partitioned topic: what this node owns
    billing_row = rows[("orders", "billing")]
    assert (billing_row["stored"], billing_row["backlog"], billing_row["in flight"],
            billing_row["consumers"]) == ("1", "1", "1", "1")  # the two ACKed went
    assert re.fullmatch(r"\d+ ms|\d+\.\d s", billing_row["oldest unacked"]), billing_row
    assert float(billing_row["acked/s"]) > 0, billing_row  # the node's rate over a minute
    assert "ZPER writer" in live  # the ZPER endpoint's line
    # The node's delivery figures count --send-dsn alone, and say so: unsaid, its "in
    # flight 0" beside billing's 1 (and a flat "in flight" line) read as a contradiction.
    labels = {key: re.sub(r"<[^>]+>", "", label) for key, label in re.findall(
        r'data-key="(\w+)"><div class="value">[^<]*</div><div class="label">(.*?)</div>', live)}
    assert {key: labels[key] for key in ("messages_inflight", "delivered", "acked",
                                         "received")} == {
        "messages_inflight": "in flight (--send-dsn)", "delivered": "delivered (--send-dsn)",
        "acked": "acked (--send-dsn)", "received": "received"}, labels
    assert "■ in flight (--send-dsn)" in live and "■ acked (--send-dsn)" in live
    assert "on --send-dsn ACK latency p50 " in live
    assert '<span class="where">(--send-dsn)</span>' in live  # not broken at its "--"
    # bytes as pzq-monitor says them: "0 B", "1.2 KB", not "0B"
    assert re.fullmatch(r"\d+(\.\d)? [KMGT]?B", billing_row["bytes"]), billing_row


def chromium_dom(url: str, profile: Path, virtual_time_ms: int | None = None) -> str:
    """The page's DOM as headless Chromium leaves it: at the load event, or after
    ``virtual_time_ms`` of the page's own time (fetches pending hold that time)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update",
             f"--user-data-dir={profile}", "--window-size=1200,1100"]
    if virtual_time_ms is not None:
        flags.append(f"--virtual-time-budget={virtual_time_ms}")
    return subprocess.run([chromium(), *flags, "--dump-dom", url], capture_output=True,
                          text=True, timeout=60, check=False).stdout


@contextmanager
def page_server(history: bytes | None, script: str = "") -> Iterator[str]:
    """The status page beside an /api/history that never answers (``history`` None), or
    answers ``history`` once and then 503, as an exporter that went away behind a proxy;
    ``script`` runs in the page after its own (a measure the DOM can then show)."""
    release, asked = threading.Event(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            if self.path == "/":
                page = status_page().replace(b"</body>", f"<script>{script}</script></body>"
                                             .encode())
                self._reply(200, "text/html", page)
            elif history is None:
                release.wait(30)  # held until the test is done with the page
            else:
                asked.append(self.path)
                self._reply(200 if len(asked) == 1 else 503, "application/json", history)

        def _reply(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_status_page_shows_each_node_as_it_answers_and_what_it_waits_for(start_node,
                                                                         tmp_path):
    quick, slow = start_node(), start_node()
    slow.pause()  # its STATS waits: the exporter's first sample of it takes long
    running = exporter.serve([quick.monitor_dsn, slow.monitor_dsn], "127.0.0.1", 0,
                             timeout=30, sample_interval=60)
    served = f"http://127.0.0.1:{running.port}"
    try:
        wait_until(lambda: history_of(served, quick.monitor_dsn)["up"], 10,
                   message="the quick node's figures while the slow one is waited for")
        dom = chromium_dom(served + "/", tmp_path / "profile", virtual_time_ms=1000)
        history = json.loads(get(served + "/api/history"))
    finally:
        slow.resume()
        running.stop()
    shown = card_of(dom, quick.monitor_dsn)
    assert 'data-state="up"' in shown and f"node {quick.stats()['node_id']}" in shown
    assert 'data-key="messages"><div class="value">0</div>' in shown
    waiting = card_of(dom, slow.monitor_dsn)
    assert 'data-state="waiting"' in waiting and ">WAITING<" in waiting
    assert re.search(r"waiting for its first answer since \d\d:\d\d:\d\d", waiting)
    assert "; waiting for the first answer of 1 of 2 nodes" in dom

    # before the exporter's first answer: what the page waits for, and since when
    with page_server(None) as url:
        dom = chromium_dom(url, tmp_path / "profile-loading")
    assert re.search(r'<div id="updated" class="loading">loading: waiting for the '
                     r"exporter's first answer \(http://127\.0\.0\.1:\d+/api/history\) "
                     r"since \d\d:\d\d:\d\d \(", dom), dom[:2000]

    # an exporter that stops answering: since when, and the last figures stay
    history["interval_seconds"] = 0.5
    with page_server(json.dumps(history).encode()) as url:
        dom = chromium_dom(url, tmp_path / "profile-failing", virtual_time_ms=3000)
    assert re.search(r'<div id="updated" class="failing">the exporter \(http://127\.0\.0\.1:'
                     r"\d+\) has not answered since \d\d:\d\d:\d\d \([^)]+\): Error: HTTP 503 "
                     r"Service Unavailable; the figures below are from \d\d:\d\d:\d\d<", dom), \
        dom[:2000]
    assert 'data-state="up"' in card_of(dom, quick.monitor_dsn)


# Once the page has drawn: each card whose content is wider than the card itself.
MEASURE_CARDS = """setTimeout(() => { document.body.dataset.overflowing = JSON.stringify(
  [...document.querySelectorAll("[data-dsn]")].filter(card => card.scrollWidth > card.clientWidth)
    .map(card => card.dataset.dsn)); }, 1500);"""


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_topics_table_fits_its_card_with_many_partitions_and_long_names(start_node,
                                                                       tmp_path):
    node = start_node(consume=True)
    assert "partitions=64" in node.ask("DECLARE TOPIC payments partitions=64")
    long_name = "customer-invoices-" + "x" * 40
    assert "partitions=16" in node.ask(f"DECLARE TOPIC {long_name} partitions=16")
    assert node.ask(f"DECLARE GROUP {long_name} reconciliation-" + "y" * 30).startswith("group")
    history = first_history(node)
    with page_server(history.encode(), MEASURE_CARDS) as url:
        dom = chromium_dom(url, tmp_path / "profile", virtual_time_ms=3000)
    assert ">payments p0,1,2,3," in dom  # every partition of the 64 is this node's
    assert 'data-overflowing="[]"' in dom, re.findall(r'data-overflowing="[^"]*"', dom)


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_topics_table_fits_its_card_with_a_group_of_a_hundred_thousand(start_node, tmp_path):
    """100,000 messages stored in a group's topic: the stored and backlog columns
    widened the table 7 px past its card's border; a table too wide for its card now
    takes a smaller type and may break the heading 'consumers'."""
    node = start_node(consume=True)
    assert "orders" in node.ask("DECLARE TOPIC orders")
    assert node.ask("DECLARE GROUP orders billing").startswith("group")
    produced = subprocess.run(
        [str(Path(sys.executable).parent / "pzq-produce"), "--dsn", node.receive_dsn,
         "--topic", "orders"], input="".join(f"{n}\n" for n in range(100_000)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=100,
        check=False)
    assert produced.returncode == 0, produced.stderr
    history = first_history(node)
    with page_server(history.encode(), MEASURE_CARDS) as url:
        dom = chromium_dom(url, tmp_path / "profile", virtual_time_ms=3000)
    assert '<td data-column="backlog">100,000</td>' in dom
    assert 'data-overflowing="[]"' in dom, re.findall(r'data-overflowing="[^"]*"', dom)


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_status_page_says_a_peer_is_down_under_the_node_s_name(start_node, tmp_path):
    """pzq-monitor --check finds a node with a peer down unhealthy; the status page
    showed its card UP, the peer only in a plain line under its charts."""
    endpoints = [f"ipc://{tmp_path}/node{index}.cluster" for index in range(2)]
    survivor, gone = (start_node("--broadcast-dsn", endpoint, "--nodes", other,
                                 "--replicas", "1", "--timeout-nodes", "1000000")
                      for endpoint, other in (endpoints, endpoints[::-1]))
    survivor.wait_stats(lambda stats: [peer["state"] for peer in stats["peers"]] == ["up"],
                        message="the peer up")
    gone.kill()
    survivor.wait_stats(lambda stats: [peer["state"] for peer in stats["peers"]] == ["down"],
                        message="the peer down")
    with page_server(first_history(survivor).encode()) as url:
        dom = chromium_dom(url, tmp_path / "profile", virtual_time_ms=3000)
    card = card_of(dom, survivor.monitor_dsn)
    assert 'data-state="up"' in card
    assert re.search(r'data-key="peers_troubled"><div class="since">peer down: '
                     + re.escape(endpoints[1]) + r" \(last heard [\d.]+ s ago\)</div>", card), \
        card[:3000]


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_status_page_says_a_nodes_store_writes_are_failing(start_node, tmp_path):
    """With its health, as pzq-monitor --check says it: STATS store_write_failing and
    for how long, and its peers in words (a full disk is made in test_disks.py; here its
    STATS as answered)."""
    node = start_node()
    history = json.loads(first_history(node))
    healthy = history["nodes"][0]
    assert healthy["stats"]["store_write_failing"] == 0
    failing = json.loads(json.dumps(healthy))
    failing["monitor"] = "tcp://127.0.0.1:1"
    failing["stats"].update(store_write_failing=1, store_write_failing_s=75.25,
                            peers=[{"endpoint": "tcp://b:1", "state": "left"},
                                   {"endpoint": "tcp://c:1", "state": "down"}])
    history["nodes"].append(failing)
    with page_server(json.dumps(history).encode()) as url:
        dom = chromium_dom(url, tmp_path / "profile", virtual_time_ms=1000)
    said = card_of(dom, failing["monitor"])
    assert 'data-key="store_write_failing"' in said and ">UP<" in said
    assert '<div class="since">store writes are failing (for 1 min 15 s)</div>' in said
    assert "store_write_failed in its log" in said
    assert "peers: tcp://b:1 left (stopped by SIGTERM), tcp://c:1 down" in said
    assert "store_write_failing" not in card_of(dom, node.monitor_dsn)


def first_history(node) -> str:
    """An exporter's /api/history of ``node`` once it has its first figures."""
    running = exporter.serve([node.monitor_dsn], "127.0.0.1", 0, timeout=10,
                             sample_interval=60)
    served = f"http://127.0.0.1:{running.port}"
    try:
        wait_until(lambda: history_of(served, node.monitor_dsn)["up"], 10,
                   message="the node's figures")
        return get(served + "/api/history")
    finally:
        running.stop()


def history_of(served: str, dsn: str) -> dict:
    nodes = json.loads(get(served + "/api/history"))["nodes"]
    return next(node for node in nodes if node["monitor"] == dsn)


def card_of(dom: str, dsn: str) -> str:
    """The HTML of the status page's card for one monitor endpoint."""
    start = dom.index(f'data-dsn="{dsn}"')
    following = dom.find('<div class="node', start)
    return dom[start:following if following > 0 else len(dom)]


def test_history_is_sampled_server_side(node, context, served):
    scripted_run(node, context)
    wait_until(lambda: len(history_of(served, node.monitor_dsn)["points"]) >= 5, 20,
               message="five samples")
    mine = history_of(served, node.monitor_dsn)
    assert mine["up"] and mine["node_id"] == node.stats()["node_id"]
    assert mine["points"][-1]["stored"] == mine["stats"]["messages"]
    dead = history_of(served, DEAD_DSN)
    assert dead["up"] is False and dead["down_since"] <= dead["points"][-1]["t"]
    assert "nothing answers there" in dead["error"]
    assert all(point["stored"] is None for point in dead["points"])


def answer(received: int, uptime: float = 100.0, messages: int = 0) -> StatsAnswer:
    return StatsAnswer("ipc://n", {"received": received, "delivered": 0, "acked": 0,
                                   "uptime_seconds": uptime, "messages": messages,
                                   "messages_inflight": 0})


def test_history_rates_gaps_and_down_since():
    node = NodeHistory("ipc://n", deque(maxlen=4))
    node.record(answer(0), 1000.0)
    node.record(answer(100, messages=7), 1002.0)
    node.record(StatsAnswer("ipc://n", None, "no answer"), 1004.0)
    node.record(StatsAnswer("ipc://n", None, "no answer"), 1006.0)
    assert node.down_since == 1004.0 and node.last_up == 1002.0 and node.error == "no answer"
    node.record(answer(5, uptime=1.0), 1008.0)  # restarted: its counters began again
    assert node.down_since is None and node.error is None
    node.record(answer(25, uptime=3.0), 1010.0)
    assert [(point["t"], point["received"], point["stored"]) for point in node.points] == [
        (1004.0, None, None), (1006.0, None, None), (1008.0, None, 0), (1010.0, 10.0, 0)]
    assert node.points.maxlen == 4


PER_SECOND_UNITS = {"ops", "Bps", "reqps", "wps", "rps"}


def test_dashboard_gives_every_series_its_unit_and_a_rate_one_per_second():
    """A rate() is charted with a per-second unit (the panel's, or its query's override),
    a count or a size with another: a panel mixing both sets the rates' by override."""
    dashboard = json.loads((ROOT / "monitoring" / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        config = panel["fieldConfig"]
        overridden = {override["matcher"]["options"]: prop["value"]
                      for override in config.get("overrides", [])
                      if override["matcher"]["id"] == "byFrameRefID"
                      for prop in override["properties"] if prop["id"] == "unit"}
        for target in panel["targets"]:
            unit = overridden.get(target["refId"], config["defaults"].get("unit"))
            assert unit, (panel["title"], target["expr"])
            is_rate = target["expr"].startswith("rate(")
            assert (unit in PER_SECOND_UNITS) == is_rate, (panel["title"], target["expr"], unit)


def test_the_prometheus_configuration_of_the_docs_takes_the_rules_and_waits_long_enough():
    """The page's prometheus.yml names the rules and scrapes each exporter with a
    scrape_timeout above the exporter's --timeout (a node down is then pzq_up 0)."""
    page = (ROOT / "docs" / "monitoring.rst").read_text()
    block = re.search(r"\.\. code-block:: yaml\n\n((?:   .*\n|\n)+)", page).group(1)
    config = yaml.safe_load(textwrap.dedent(block))
    assert [rules.endswith("pzq-alerts.yml") for rules in config["rule_files"]] == [True]
    (job,) = config["scrape_configs"]
    seconds = {"s": 1, "m": 60}
    timeout = int(job["scrape_timeout"][:-1]) * seconds[job["scrape_timeout"][-1]]
    interval = int(job["scrape_interval"][:-1]) * seconds[job["scrape_interval"][-1]]
    default = exporter.make_argument_parser().parse_args([]).timeout
    assert default < timeout <= interval
    targets = job["static_configs"][0]["targets"]
    assert targets and all(target.endswith(":" + exporter.DEFAULT_LISTEN.split(":")[1])
                           for target in targets)


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="Prometheus' promtool is not installed")
def test_promtool_accepts_the_alert_rules():
    rules = ROOT / "monitoring" / "alerts.yml"
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True,
                             text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="Prometheus' promtool is not installed")
def test_every_alert_fires_on_its_trouble_with_a_summary_in_units(tmp_path):
    """promtool's unit tests (tests/fixtures/prometheus/alerts_test.yml) give each alert
    the series of a node gone wrong that way and the summary it must page with: the
    backlog's growth read 11.666666666666666 messages/s, the p99 as many digits."""
    rules = ROOT / "monitoring" / "alerts.yml"
    cases = ROOT / "tests" / "fixtures" / "prometheus" / "alerts_test.yml"
    alerts = {rule["alert"] for group in yaml.safe_load(rules.read_text())["groups"]
              for rule in group["rules"]}
    tested = {case["alertname"] for test in yaml.safe_load(cases.read_text())["tests"]
              for case in test["alert_rule_test"]}
    assert tested == alerts
    shutil.copy(rules, tmp_path / "alerts.yml")
    shutil.copy(cases, tmp_path / "alerts_test.yml")
    ran = subprocess.run(["promtool", "test", "rules", str(tmp_path / "alerts_test.yml")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def exported_labels(metrics: str) -> dict[str, dict[str, set[str]]]:
    """Each exported metric's labels and the values seen of each."""
    found: dict[str, dict[str, set[str]]] = {}
    for line in metrics.splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = found.setdefault(name.split(" ")[0], {})
            for label, value in re.findall(r'(\w+)="([^"]*)"', rest.rpartition("}")[0]):
                labels.setdefault(label, set()).add(value)
    # series only with peers or an archive topic
    found.setdefault("pzq_peer_up", {"node": set(), "monitor": set(), "peer": set()})
    for name in ("pzq_archive_last_offset", "pzq_archive_damaged_records_total"):
        found.setdefault(name, {"node": set(), "monitor": set(), "topic": set()})
    return found


def label_names(text: str) -> set[str]:
    """The labels a legend or an alert's summary shows ({{node}}, {{ $labels.node }})."""
    return set(re.findall(r"{{ *\$?(?:labels\.)?(\w+) *}}", text)) - {"value"}


def result_labels(expression: str, labels_of: dict[str, dict[str, set[str]]]) -> set[str]:
    """The labels an expression's series keep: those of an aggregation's ``by``, less a
    histogram's ``le``; else those of the metrics it names."""
    kept = re.search(r"\bby *\(([^)]*)\)", expression)
    if kept:
        return {name.strip() for name in kept.group(1).split(",")} - {"le"}
    return {label for metric in re.findall(r"\bpzq_\w+", expression)
            for label in labels_of.get(metric, {})}


def test_alert_rules_and_dashboard_use_exported_metrics(group_node, context, served_groups):
    """Every metric a panel or rule uses is one a node with groups, an archive and a
    ZPER endpoint exports, with the labels and label values it selects by; every label a
    legend or a summary shows is one its query's series keep."""
    scripted_run(group_node, context)
    group_run(group_node, context).close()
    group_node.wait_stats(lambda s: s["archive"]["archived"] >= 1, message="one archived")
    labels_of = exported_labels(get(served_groups + "/metrics"))
    exported = set(labels_of)
    rules = yaml.safe_load((ROOT / "monitoring" / "alerts.yml").read_text())
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    # pzq_store_write_failing is the one the docs tell to alert on (a full disk)
    assert {"PzqNodeDown", "PzqBacklogGrowing", "PzqRedeliveryStorm", "PzqPeerDown",
            "PzqReplicationFailures", "PzqArchiveFailures", "PzqArchiveDamaged",
            "PzqQueueFull", "PzqStoreWriteFailing", "PzqGroupFallingBehind"} <= alerts.keys()
    assert "pzq_store_write_failing" in alerts["PzqStoreWriteFailing"]["expr"]
    for rule in alerts.values():  # what a summary names, the expression's result carries
        assert label_names(rule["annotations"]["summary"]) <= result_labels(
            rule["expr"], labels_of), rule["alert"]
    dashboard = json.loads((ROOT / "monitoring" / "grafana-dashboard.json").read_text())
    targets = [target for panel in dashboard["panels"] for target in panel.get("targets", [])]
    expressions = [target["expr"] for target in targets]
    expressions += [rule["expr"] for rule in alerts.values()]
    charted = set()
    for expression in expressions:
        used = set(re.findall(r"\bpzq_\w+", expression))
        assert used and used <= exported, expression
        for metric, matchers in re.findall(r"\b(pzq_\w+)\{([^}]*)\}", expression):
            for name, value in re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', matchers):
                assert value in labels_of[metric].get(name, set()), (expression, name, value)
        charted |= used
    assert {"pzq_expired_total", "pzq_evicted_total", "pzq_queue_full_total",
            "pzq_archived_total", "pzq_archive_failures_total",
            "pzq_ack_latency_seconds_bucket", "pzq_topic_messages_stored",
            "pzq_topic_stored_bytes", "pzq_group_backlog", "pzq_group_messages_inflight",
            "pzq_group_consumers", "pzq_group_oldest_unacked_seconds", "pzq_group_acked_total",
            "pzq_zper_written_total", "pzq_zper_written_bytes_total", "pzq_zper_refused_total",
            "pzq_zper_relay_clients", "pzq_zper_ack_subscriptions", "pzq_archive_bytes",
            "pzq_group_lag_seconds", "pzq_topic_oldest_seconds", "pzq_topic_scheduled",
            "pzq_ttl_expired_total"} <= charted
    for target in targets:  # a legend names what its query's series carry
        assert label_names(target["legendFormat"]) <= result_labels(target["expr"], labels_of), \
            target
