"""scripts/local-cluster: three nodes start, see each other, survive a kill, stop."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import wait_until

from pzq.client import Consumer, Producer

ROOT = Path(__file__).parent.parent
pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def local_cluster(tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "PZQ_CLUSTER_DIR": str(tmp_path / "cluster"), "PZQ_VENV": sys.prefix}
    return subprocess.run([str(ROOT / "scripts" / "local-cluster"), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=True).stdout


def test_local_cluster_start_status_kill_stop(tmp_path, context):
    local_cluster(tmp_path, "start", "2")
    try:
        wait_until(lambda: local_cluster(tmp_path, "status").count(" up,") == 6, 20,
                   interval=0.2, message="every node seeing both peers up")
        with Producer("tcp://127.0.0.1:10131", context=context) as producer:
            assert all(not ack.replication_failed for ack in
                       [producer.produce([b"%d" % i]) for i in range(5)])
        local_cluster(tmp_path, "kill", "0")
        received = set()
        with Consumer(["tcp://127.0.0.1:11132", "tcp://127.0.0.1:12132"],
                      context=context) as consumer:
            def all_received() -> bool:
                message = consumer.receive(0.1)
                if message is not None:
                    received.add(message.parts[0])
                    message.ack()
                return len(received) == 5
            wait_until(all_received, 30, interval=0, message="node 0's messages from survivors")
        assert "taking over ['" in local_cluster(tmp_path, "status")
    finally:
        local_cluster(tmp_path, "stop")
