"""STATS, pzq-monitor, the Prometheus exporter and the status page against real nodes."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from monitoring import exporter
from pzq import monitor_cli, tools
from pzq.client import Consumer, Producer

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).parent.parent
# No process answers here: a socket path nobody binds, not a port someone might use.
DEAD_DSN = "ipc:///nonexistent/pzq-test/dead-node"


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
    lines = tools.request_monitor(node.monitor_dsn, "MONITOR").decode().splitlines()
    assert [line.split(":")[0] for line in lines[:6]] == [
        "messages", "messages_inflight", "db_size", "inflight_db_size", "syncs",
        "expired_messages"]


def test_pzq_monitor_once_json_and_check(node, capsys):
    assert monitor_cli.main(["--dsn", node.monitor_dsn]) == 0
    assert node.figures()["node_id"] in capsys.readouterr().out
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["node_id"] == node.figures()["node_id"]
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--check", "--interval", "0.1"]) == 0
    assert "healthy" in capsys.readouterr().out
    assert monitor_cli.main(["--dsn", DEAD_DSN, "--check", "--timeout", "0.5"]) == \
        monitor_cli.EXIT_NO_ANSWER
    assert "unhealthy: no answer" in capsys.readouterr().err
    assert monitor_cli.main(["--dsn", node.monitor_dsn, "--dsn", DEAD_DSN, "--watch",
                             "--iterations", "2", "--interval", "0.1", "--timeout", "0.3"]) == 0
    assert "DOWN" in capsys.readouterr().out


def test_check_reports_an_unhealthy_node():
    before = {"store_failures": 0, "peers": []}
    now = {"store_failures": 3, "pending_producer_acks": 50_000,
           "peers": [{"endpoint": "tcp://b:1", "state": "down"}]}
    problems = monitor_cli.health_problems(before, now, max_pending_acks=10_000)
    assert problems == ["store writes are failing", "50000 producer ACKs cannot be sent",
                        "peer down: tcp://b:1"]


@pytest.fixture
def served(node):
    server = exporter.serve([node.monitor_dsn, DEAD_DSN], "127.0.0.1", 0, timeout=0.5)
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_exporter_metrics_against_a_real_node_and_a_dead_one(node, context, served):
    scripted_run(node, context)
    metrics = get(served + "/metrics")
    assert f'pzq_up{{node="{node.monitor_dsn}"}} 1.0' in metrics
    assert f'pzq_up{{node="{DEAD_DSN}"}} 0.0' in metrics
    assert f'pzq_received_total{{node="{node.monitor_dsn}"}} 20.0' in metrics
    assert f'pzq_acks_total{{node="{node.monitor_dsn}",outcome="acked"}} 12.0' in metrics
    assert f'pzq_messages_stored{{node="{node.monitor_dsn}"}} 8.0' in metrics
    assert f'pzq_producer_acks_total{{node="{node.monitor_dsn}",outcome="ok"}} 20.0' in metrics
    answers = json.loads(get(served + "/api/stats"))
    assert answers[DEAD_DSN] is None and answers[node.monitor_dsn]["acked"] == 12


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_status_page_in_a_real_browser(node, context, served, tmp_path):
    scripted_run(node, context)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
             "--window-size=1200,900"]
    dom = subprocess.run([chromium(), *flags, "--dump-dom", served + "/"], capture_output=True,
                         text=True, timeout=60).stdout
    node_id = node.figures()["node_id"]
    assert f"node {node_id}" in dom
    assert 'data-key="acked"><div class="value">12</div>' in dom
    assert "DOWN" in dom  # the dead endpoint
    shot = tmp_path / "status.png"
    subprocess.run([chromium(), *flags, f"--screenshot={shot}", served + "/"],
                   capture_output=True, timeout=60)
    assert shot.stat().st_size > 10_000


def test_alert_rules_and_dashboard_use_exported_metrics():
    rules = yaml.safe_load((ROOT / "monitoring" / "alerts.yml").read_text())
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    assert {"PzqNodeDown", "PzqBacklogGrowing", "PzqRedeliveryStorm", "PzqPeerDown",
            "PzqReplicationFailures"} <= alerts.keys()
    exported = {name for name, _, _ in exporter.GAUGES} | {
        name + "_total" for name, _, _ in exporter.COUNTERS} | {
        "pzq_up", "pzq_acks_total", "pzq_producer_acks_total", "pzq_ack_latency_seconds",
        "pzq_peer_up", "pzq_archive_last_offset"}
    dashboard = json.loads((ROOT / "monitoring" / "grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"]
                   for target in panel.get("targets", [])]
    expressions += [rule["expr"] for rule in alerts.values()]
    for expression in expressions:
        used = {word for word in expression.replace("(", " ").replace(")", " ").replace(
            "{", " ").replace("[", " ").split() if word.startswith("pzq_")}
        assert used and used <= exported, expression
