"""A consumer whose node is away says so, on real daemons: ``receive()`` with no
timeout waited for ever without a word while the node was down, stopped or refusing
the client's key. Each consumer (sync and asyncio, of --send-dsn and of a group)
logs a warning on the ``pzq.client`` logger once an endpoint has had no connection
for SILENT_WARN_S, naming it and why, logs again when it answers, and tells the same
in ``connected``; ``receive`` still returns what it returned."""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any

import pytest
import zmq
import zmq.asyncio

from pzq import aio
from pzq.client import Consumer, GroupConsumer
from pzq.client.link_watch import SILENT_WARN_S
from tests.support.aio import run
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(120)

LOST = "its connection was lost (the node stopped, or did not answer the connection's " \
       "heartbeats)"


def settled(result: Any, timeout: float = 60) -> Any:
    """What a sync call returned, or what an asyncio one's coroutine ends with."""
    return run(result, timeout) if inspect.isawaitable(result) else result


def said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "pzq.client" and record.levelno == level]


def warned_while_waiting(consumer: Any, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings said once the waits of ``receive(1)`` (each None) said one."""
    wait_until(lambda: settled(consumer.receive(1)) is None and said(caplog, logging.WARNING),
               SILENT_WARN_S + 30, message="the consumer's warning")
    return said(caplog, logging.WARNING)


def answers_again(consumer: Any, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    wait_until(lambda: consumer.connected, 30, message="the consumer connected again")
    (again,) = said(caplog, logging.INFO)
    assert again.startswith(f"pzq consumer: {dsn} answers again (no connection for "), again


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_consumer_of_a_node_that_was_killed_says_so_and_again_when_it_answers(
        start_node, context, aio_context, caplog, kind):
    caplog.set_level(logging.INFO, logger="pzq.client")
    node = start_node()
    consumer: Any = (Consumer(node.send_dsn, context=context) if kind == "sync"
                     else aio.Consumer(node.send_dsn, context=aio_context))
    try:
        wait_until(lambda: consumer.connected, 30, message="the consumer connected")
        node.kill()
        assert warned_while_waiting(consumer, caplog) == [
            f"pzq consumer: {node.send_dsn}: no connection for {SILENT_WARN_S:.1f} s: {LOST}; "
            "trying on"]
        assert not consumer.connected
        node.restart()
        answers_again(consumer, node.send_dsn, caplog)
    finally:
        settled(consumer.close())


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_group_consumer_of_a_stopped_node_says_so_and_again_when_it_goes_on(
        start_node, context, aio_context, caplog, kind):
    """SIGSTOP: the connection stands, and only its heartbeats tell the node is gone."""
    caplog.set_level(logging.INFO, logger="pzq.client")
    node = start_node("--consume-heartbeat", "1s", consume=True)
    if kind == "sync":
        consumer: Any = GroupConsumer(node.consume_dsn, "orders", "g", declare=True,
                                      context=context)
    else:
        consumer = aio.GroupConsumer(node.consume_dsn, "orders", "g", declare=True,
                                     context=aio_context)
        settled(consumer.join())
    try:
        assert consumer.connected
        node.pause()
        assert warned_while_waiting(consumer, caplog) == [
            f"pzq consumer: {node.consume_dsn}: no connection for {SILENT_WARN_S:.1f} s: "
            f"{LOST}; trying on"]
        assert not consumer.connected
        node.resume()
        answers_again(consumer, node.consume_dsn, caplog)
    finally:
        node.resume()
        settled(consumer.close())


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_consumer_whose_key_the_node_refuses_says_so(start_node, context, aio_context,
                                                       caplog, curve_keys, kind):
    node = start_node(*curve_keys["args"])
    stranger = curve_keys["stranger"]
    consumer: Any = (Consumer(node.send_dsn, context=context, curve=stranger)
                     if kind == "sync" else
                     aio.Consumer(node.send_dsn, context=aio_context, curve=stranger))
    try:
        assert warned_while_waiting(consumer, caplog) == [
            f"pzq consumer: {node.send_dsn}: no connection for {SILENT_WARN_S:.1f} s: the "
            "node refused this client's CURVE key; trying on"]
        assert not consumer.connected
    finally:
        settled(consumer.close())


def test_a_consumer_that_connects_at_once_says_nothing(start_node, context, caplog):
    """And a wait by its timeout returns None as it did."""
    node = start_node()
    with Consumer(node.send_dsn, context=context) as consumer:
        wait_until(lambda: consumer.connected, 30, message="the consumer connected")
        assert consumer.receive(SILENT_WARN_S + 1) is None
        assert consumer.connected
    assert said(caplog, logging.WARNING) == said(caplog, logging.INFO) == []


@pytest.mark.parametrize("kind", ["consumer", "group consumer", "asyncio consumer",
                                  "asyncio group consumer"])
def test_a_context_destroyed_with_a_consumer_open_ends(start_node, kind):
    """The watch's socket is one of the consumer's own context: destroy() closes it with
    the rest (one made on another context object kept destroy()'s term() waiting for
    ever, as a killed consumer's context.destroy(linger=0) in the group soaks)."""
    node = start_node(consume=True)
    context: Any = zmq.asyncio.Context() if kind.startswith("asyncio") else zmq.Context()
    consumer: Any = {
        "consumer": lambda: Consumer(node.send_dsn, context=context),
        "group consumer": lambda: GroupConsumer(node.consume_dsn, "orders", "billing",
                                                declare=True, context=context),
        "asyncio consumer": lambda: aio.Consumer(node.send_dsn, context=context),
        "asyncio group consumer": lambda: aio.GroupConsumer(
            node.consume_dsn, "orders", "billing", declare=True, context=context),
    }[kind]()
    wait_until(lambda: consumer.connected, 30, message="the consumer connected")
    destroyed = threading.Event()
    threading.Thread(target=lambda: (context.destroy(linger=0), destroyed.set()),
                     daemon=True).start()
    assert destroyed.wait(10), "context.destroy() did not end"
