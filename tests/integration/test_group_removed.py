"""A group an operator removes while its consumers are connected stays removed: each
consumer is told and stops (pzq-consume: exit 1, the node's words). Its
GroupConsumer joined again at the next heartbeat, and that CONSUME made the group
anew from the topic's earliest message: REMOVE GROUP undone within two seconds, and
pzq-consume went on waiting, saying nothing."""

from __future__ import annotations

import subprocess

import pytest

from pzq.client import request_monitor
from tests.integration.test_groups import FAST
from tests.integration.test_tools import BIN
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(60)


def ask(node, command: str) -> str:
    return request_monitor(node.monitor_dsn, command, timeout=10).decode()


def test_pzq_consume_stops_and_the_group_stays_removed(start_node):
    node = start_node(*FAST, consume=True)
    assert ask(node, "DECLARE TOPIC orders").startswith("topic orders")
    assert ask(node, "DECLARE GROUP orders g").startswith("group g")
    with subprocess.Popen([str(BIN / "pzq-consume"), "--dsn", node.consume_dsn, "--topic",
                           "orders", "--group", "g", "--idle-timeout", "20"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as consumer:
        wait_until(lambda: "consumers=1" in ask(node, "TOPICS"), 10,
                   message="pzq-consume joined")
        assert ask(node, "REMOVE GROUP orders g").startswith("removed group g")
        _, stderr = consumer.communicate(timeout=15)
    assert consumer.returncode == 1, stderr
    assert stderr.splitlines()[-1] == "pzq-consume: error: group g of topic orders was removed"
    assert "group g" not in ask(node, "TOPICS")
