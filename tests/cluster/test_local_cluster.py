"""scripts/local-cluster: three nodes start, see each other, survive a kill, stop.

Every run takes a base port whose fifteen ports are free, so a node already running on
this machine can neither take the test's messages nor make it fail.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pzq.bench.ports import ports_free
from pzq.client import Consumer, GroupConsumer, Producer
from tests.support.harness import wait_until

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
SINGLE_NODE_PORTS = {11131, 11132}  # its tcp defaults; its monitor is on ipc


def free_base_port() -> int:
    """A base port P whose cluster ports P+1..P+25 are all free now, below the range
    the kernel hands out for port 0 and outgoing connections (32768 and up on Linux),
    so no other test's node or connection takes one before the cluster binds it."""
    for _ in range(100):
        base = random.randrange(12_000, 32_700, 10)
        if ports_free([base + offset for offset in range(1, 26)]):
            return base
    raise RuntimeError("no free range of 25 ports on 127.0.0.1")


def run(tmp_path: Path, *args: str, base_port: int | None = None,
        timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PZQ_CLUSTER_DIR": str(tmp_path / "cluster"), "PZQ_VENV": sys.prefix}
    env.pop("PZQ_CLUSTER_BASE_PORT", None)
    options = ["--base-port", str(base_port)] if base_port is not None else []
    return subprocess.run([str(ROOT / "scripts" / "local-cluster"), *options, *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def local_cluster(tmp_path: Path, *args: str, base_port: int | None = None) -> str:
    result = run(tmp_path, *args, base_port=base_port)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_local_cluster_start_status_kill_stop(tmp_path, context):
    base = free_base_port()
    started = local_cluster(tmp_path, "start", "2", base_port=base)
    try:
        assert started.count(": ready, pid ") == 3
        assert "every node sees its peers up" in started
        wait_until(lambda: local_cluster(tmp_path, "status").count(" up,") == 6, 20,
                   interval=0.2, message="every node seeing both peers up")
        with Producer(f"tcp://127.0.0.1:{base + 1}", context=context) as producer:
            assert all(not ack.replication_failed for ack in
                       [producer.produce([b"%d" % i]) for i in range(5)])
        # every node takes consumer groups, as routed consumers need
        for node in range(3):
            with GroupConsumer(f"tcp://127.0.0.1:{base + 10 * node + 5}", "t", "g",
                               declare=True, timeout=10, context=context) as group:
                assert group.receive(0) is None
        local_cluster(tmp_path, "kill", "0")
        received = set()
        with Consumer([f"tcp://127.0.0.1:{base + 12}", f"tcp://127.0.0.1:{base + 22}"],
                      context=context) as consumer:
            def all_received() -> bool:
                message = consumer.receive(0.1)
                if message is not None:
                    received.add(message.parts[0])
                    message.ack()
                return len(received) == 5
            wait_until(all_received, 30, interval=0, message="node 0's messages from survivors")
        partial = run(tmp_path, "status")  # node 0 down: said, and exit 1
        assert partial.returncode == 1, partial.stdout + partial.stderr
        assert "taking over ['" in partial.stdout and "   not answering" in partial.stdout
        assert "1 of 3 nodes not answering" in partial.stderr
    finally:
        local_cluster(tmp_path, "stop")


def test_start_reports_a_node_that_failed_and_exits_non_zero(tmp_path):
    base = free_base_port()
    taken = socket.socket()
    taken.bind(("127.0.0.1", base + 11))  # node 1's producer port
    taken.listen()
    try:
        result = run(tmp_path, "start", base_port=base)
    finally:
        taken.close()
    assert result.returncode != 0
    assert re.search(rf"node 1: failed to start: pzq: error: cannot bind --receive-dsn "
                     rf"tcp://127.0.0.1:{base + 11}: Address already in use", result.stderr)
    assert "not every node started" in result.stderr
    assert not list((tmp_path / "cluster").glob("node*/pid"))
    for pid in map(int, re.findall(r"ready, pid (\d+)", result.stdout)):
        wait_until(lambda pid=pid: not process_alive(pid), 20, message=f"node pid {pid} stopped")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_default_ports_never_collide_with_a_single_nodes():
    listing = subprocess.run([str(ROOT / "scripts" / "local-cluster"), "endpoints"],
                             env={**os.environ, "PZQ_CLUSTER_DIR": "/nonexistent/cluster"},
                             capture_output=True, text=True, timeout=30, check=True).stdout
    ports = {int(port) for port in re.findall(r":(\d+)", listing)}
    assert len(ports) == 15 and not ports & SINGLE_NODE_PORTS
