"""CURVE for every client that reads from a node: the archive reader, the exporter, and
the routed clients' route table. Each reads with an authorized key, and with a key the
node does not know fails within its timeout, naming the refused key."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pzq import curve_probe
from pzq.archive.reader import ArchiveReader
from pzq.client import GroupConsumer, RoutedGroupConsumer, RoutedProducer, request_monitor
from pzq.curve_probe import CLIENT_KEY_REFUSED, CURVE_REQUIRED, SERVER_KEY_WRONG
from pzq.errors import ConsumeUnanswered
from pzq.monitoring import exporter
from pzq.security import ClientCurve

pytestmark = pytest.mark.timeout(90)

REFUSED = re.escape(CLIENT_KEY_REFUSED)  # a pattern for pytest.raises


@pytest.fixture
def secure_node(start_node, curve_keys, tmp_path):
    """A node with CURVE on every socket, an archive reader socket and a partitioned
    topic for the routed clients."""
    node = start_node(*curve_keys["args"], "--archive-dir", str(tmp_path / "archive"),
                      "--archive-dsn", "tcp://127.0.0.1:*", "--flush-interval", "50",
                      "--partitions", "orders=2", consume=True)
    node.curve = curve_keys["client"]
    node.archive_dsn = node.event("node_ready")["archive"]
    return node


def archive_some(node, context, count: int) -> None:
    """``count`` messages to orders through the routed clients, each ACKed, archived and
    made durable."""
    with RoutedGroupConsumer(node.monitor_dsn, "orders", "billing", context=context,
                             curve=node.curve) as consumer:
        with RoutedProducer(node.monitor_dsn, "orders", context=context,
                            curve=node.curve) as producer:
            for number in range(count):
                producer.send([b"order %d" % number], key=b"k%d" % number)
            assert all(ack.ok for ack in producer.flush(15))
        for _ in range(count):
            message = consumer.receive(10)
            assert message is not None
            message.ack()
    node.wait_stats(lambda s: s["archive"]["archived"] == count, message="archived")
    node.wait_archive_durable()


def within(seconds: float, started: float) -> None:
    assert time.monotonic() - started < seconds, "the refusal took longer than its timeout"


def test_the_routed_clients_fetch_their_table_with_curve(secure_node, curve_keys, context):
    archive_some(secure_node, context, 6)  # both clients, with the authorized key
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"no node answered ROUTES: .*{REFUSED}"):
        RoutedProducer(secure_node.monitor_dsn, "orders", context=context,
                       curve=curve_keys["stranger"])
    within(5.0 + 2, started)  # the route table's 5 s, and the probe


def test_the_sync_group_consumer_says_why_consume_has_no_answer(secure_node, curve_keys,
                                                                 context, tmp_path):
    client, stranger = curve_keys["client"], curve_keys["stranger"]
    wrong_server = ClientCurve(client.keys, stranger.keys.public)
    for curve, reason in ((stranger, CLIENT_KEY_REFUSED), (wrong_server, SERVER_KEY_WRONG)):
        started = time.monotonic()
        with pytest.raises(ConsumeUnanswered) as raised:
            GroupConsumer(secure_node.consume_dsn, "orders", "billing", context=context,
                          curve=curve, timeout=2)
        assert str(raised.value) == f"no answer to CONSUME within 2 s: {reason}"
        within(2 + 3, started)  # the wait, and the probe's handshakes
    nowhere = f"ipc://{tmp_path}/no-node"
    with pytest.raises(TimeoutError, match=re.escape(
            "no answer to CONSUME within 1 s: nothing answers there (is the node running?)")):
        GroupConsumer(nowhere, "orders", "billing", context=context, timeout=1)


def test_the_archive_reader_reads_with_curve(secure_node, curve_keys, context):
    archive_some(secure_node, context, 4)
    with ArchiveReader(secure_node.archive_dsn, "orders", context=context,
                       curve=curve_keys["client"]) as reader:
        bodies = sorted(message.parts[0] for _, message in reader.messages())
    assert bodies == [b"order %d" % number for number in range(4)]
    started = time.monotonic()
    with ArchiveReader(secure_node.archive_dsn, "orders", context=context, timeout=2,
                       curve=curve_keys["stranger"]) as reader:
        with pytest.raises(TimeoutError, match=f"within 2 s: .*{REFUSED}"):
            reader.earliest()
    within(2 + 2, started)
    with ArchiveReader(secure_node.archive_dsn, "orders", context=context,
                       timeout=1) as reader:  # no CURVE at all: said so, not "or" CURVE
        with pytest.raises(TimeoutError, match=re.escape(CURVE_REQUIRED)):
            reader.latest()


def test_a_client_without_keys_is_told_the_node_requires_curve(secure_node, context):
    """It blamed "a busy node, not a pzq endpoint, or a node that requires CURVE"; the
    node's greeting names CURVE, which a server of another protocol's does not."""
    with pytest.raises(TimeoutError) as raised:
        request_monitor(secure_node.monitor_dsn, "PING", timeout=1, context=context)
    assert str(raised.value).endswith(CURVE_REQUIRED)
    with socket.create_server(("127.0.0.1", 0)) as other:  # accepts, then hangs up
        dsn = f"tcp://127.0.0.1:{other.getsockname()[1]}"
        accepted = threading.Thread(target=lambda: other.accept()[0].close())
        accepted.start()
        assert "requires CURVE (its greeting" not in curve_probe.why_silent(dsn, None, 1)
        accepted.join(5)


def scrape(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        text: str = answer.read().decode()
    return text


def test_the_exporter_scrapes_with_curve(secure_node, curve_keys):
    files = curve_keys["files"]
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "pzq-exporter"), "--dsn", secure_node.monitor_dsn,
         "--listen", "127.0.0.1:0", "--curve-client-key", files["client"],
         "--curve-server-key", files["node"]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(re.search(r":(\d+)/", process.stdout.readline()).group(1))
        metrics = scrape(port, "/metrics")
        (up,) = [row for row in metrics.splitlines() if row.startswith("pzq_up{")]
        assert secure_node.monitor_dsn in up and up.endswith(" 1.0"), up
    finally:
        process.terminate()
        process.communicate(timeout=30)
    refused = exporter.serve([secure_node.monitor_dsn], "127.0.0.1", 0, timeout=1.0,
                             curve=curve_keys["stranger"], sample_interval=60)
    try:
        answer = json.loads(scrape(refused.port, "/api/stats"))[secure_node.monitor_dsn]
        assert answer["up"] is False and CLIENT_KEY_REFUSED in answer["error"]
    finally:
        refused.stop()


def test_a_client_key_file_that_is_not_there_is_one_line(secure_node, curve_keys, tmp_path):
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pzq-exporter"), "--dsn", secure_node.monitor_dsn,
         "--curve-client-key", str(tmp_path / "missing.key_secret"),
         "--curve-server-key", curve_keys["files"]["node"]],
        capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("pzq-exporter: error: ") and "missing.key_secret" in (
        result.stderr) and "Traceback" not in result.stderr

