"""A sync client's life as a user meets it, against a real node: ``close()`` twice is
one close, and a client used after it raises ClientClosed, one line, as a pzq.aio
client does (the sync ones raised pyzmq's "Socket operation on non-socket" or
"Operation not supported", and a GroupConsumer's ``receive`` still handed out what it
held). A client made before a fork is closed in the child, saying so: the parent's
socket waited there for ever, past every timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from pzq.client import Consumer, GroupConsumer, Producer, RoutedGroupConsumer, RoutedProducer
from pzq.errors import ClientClosed

pytestmark = pytest.mark.timeout(60)


def assert_closed_for(calls: list[Callable[[], Any]], client: str) -> None:
    for call in calls:
        with pytest.raises(ClientClosed, match=f"^the {client} is closed$"):
            call()


@pytest.fixture
def group_node(start_node):
    return start_node("--ack-timeout", "1s", consume=True)


def test_a_producer_and_a_consumer_used_after_close_raise_client_closed(node, context):
    producer = Producer(node.receive_dsn, context=context)
    producer.produce([b"one"])
    producer.send([b"two"])
    producer.close()
    producer.close()
    assert producer.closed
    assert_closed_for([lambda: producer.send([b"a"]), lambda: producer.produce([b"a"]),
                       producer.acks, producer.flush], "producer")
    consumer = Consumer(node.send_dsn, context=context)
    message = consumer.receive(10)
    assert message is not None
    consumer.close()
    consumer.close()
    assert consumer.closed
    assert_closed_for([lambda: consumer.receive(0), message.ack, message.nack], "consumer")


def test_a_group_consumer_used_after_close_raises_client_closed(group_node, context):
    with Producer(group_node.receive_dsn, context=context) as producer:
        for n in range(3):
            producer.produce([b"order %d" % n], topic="orders")
    consumer = GroupConsumer(group_node.consume_dsn, "orders", "billing", declare=True,
                             context=context)
    message = consumer.receive(10)
    assert message is not None  # the others arrived with it: held, not handed out
    consumer.close()
    consumer.close()
    assert consumer.closed
    assert_closed_for([lambda: consumer.receive(0), lambda: consumer.receive_many(5, 0),
                       message.ack, message.nack, message.working, message.reject,
                       lambda: consumer.ack_confirmed([message])], "consumer")


def test_the_routed_clients_used_after_close_raise_client_closed(group_node, context):
    producer = RoutedProducer(group_node.monitor_dsn, "orders", context=context)
    producer.send([b"one"], key="k")
    producer.close()
    producer.close()
    assert_closed_for([lambda: producer.send([b"a"], key="k"), producer.acks,
                       producer.flush], "producer")
    consumer = RoutedGroupConsumer(group_node.monitor_dsn, "orders", "billing",
                                   context=context)
    consumer.close()
    consumer.close()
    assert_closed_for([lambda: consumer.receive(0), lambda: consumer.receive_many(5, 0),
                       lambda: consumer.ack_many([])], "consumer")


CHILD = """
    import os
    from pzq.client import Producer
    producer = Producer({dsn!r})
    producer.produce([b"before the fork"], timeout=10)
    child = os.fork()
    if child == 0:
        try:
            producer.produce([b"in the child"], timeout=3)
        except Exception as exc:
            print(type(exc).__name__, exc, flush=True)
        with Producer({dsn!r}) as own:
            print("own", own.produce([b"the child's own"], timeout=10).ok, flush=True)
        os._exit(0)
    os.waitpid(child, 0)
    print("parent", producer.produce([b"after the fork"], timeout=10).ok)
    producer.close()
"""


def test_a_client_made_before_a_fork_is_closed_in_the_child_saying_why(node):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD.format(
        dsn=node.receive_dsn))], capture_output=True, text=True, timeout=45)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ClientClosed this Producer was made before this process forked: its socket is "
        "the parent's, which ZeroMQ cannot use in a child (make the client in the child)",
        "own True", "parent True"]
