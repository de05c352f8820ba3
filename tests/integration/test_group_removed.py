"""A group an operator removes while its consumers are connected stays removed: each
consumer is told and stops (pzq-consume: exit 1, the node's words). Its
GroupConsumer joined again at the next heartbeat, and that CONSUME made the group
anew from the topic's earliest message: REMOVE GROUP undone within two seconds, and
pzq-consume went on waiting, saying nothing."""

from __future__ import annotations

import subprocess

import pytest

from pzq import aio
from pzq.client import ConsumeRefused, GroupConsumer, RoutedGroupConsumer, request_monitor
from tests.integration.test_groups import FAST
from tests.integration.test_tools import BIN
from tests.support.aio import run
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


REMOVED = "^group g of topic orders was removed$"


def _removed_while_joined(node) -> None:
    wait_until(lambda: "consumers=1" in ask(node, "TOPICS"), 10, message="the consumer joined")
    assert ask(node, "REMOVE GROUP orders g").startswith("removed group g")


@pytest.mark.parametrize("routed", [False, True], ids=["group", "routed"])
def test_group_consumers_raise_consume_refused_at_every_receive_after(start_node, context,
                                                                      routed):
    """Its receive after the first refusal returned None until a frame came."""
    node = start_node(*FAST, consume=True)
    assert ask(node, "DECLARE TOPIC orders").startswith("topic orders")
    consumer = (RoutedGroupConsumer(node.monitor_dsn, "orders", "g", context=context)
                if routed else GroupConsumer(node.consume_dsn, "orders", "g", context=context))
    with consumer:
        assert consumer.receive(0.2) is None  # joined
        _removed_while_joined(node)
        with pytest.raises(ConsumeRefused, match=REMOVED):
            consumer.receive(10)
        for _ in range(2):
            with pytest.raises(ConsumeRefused, match=REMOVED):
                consumer.receive(0.2)
        with pytest.raises(ConsumeRefused, match=REMOVED):
            consumer.receive_many(10, 0.2)


@pytest.mark.parametrize("routed", [False, True], ids=["group", "routed"])
def test_asyncio_group_consumers_raise_consume_refused_at_every_receive_after(
        start_node, aio_context, routed):
    node = start_node(*FAST, consume=True)
    assert ask(node, "DECLARE TOPIC orders").startswith("topic orders")

    async def main() -> None:
        consumer = (aio.RoutedGroupConsumer(node.monitor_dsn, "orders", "g", context=aio_context)
                    if routed else
                    aio.GroupConsumer(node.consume_dsn, "orders", "g", context=aio_context))
        try:
            await consumer.join()
            _removed_while_joined(node)
            with pytest.raises(ConsumeRefused, match=REMOVED):
                await consumer.receive(10)
            for _ in range(2):
                with pytest.raises(ConsumeRefused, match=REMOVED):
                    await consumer.receive(0.2)
            with pytest.raises(ConsumeRefused, match=REMOVED):
                await consumer.receive_many(10, 0.2)
        finally:
            await consumer.close()

    run(main())
