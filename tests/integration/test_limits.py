"""Poison messages go to the dead letters (listed and moved with pzq-ctl, on daemons); a
full queue refuses, never drops (on nodes in this process, on loopback ports of their
own)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pzq.client import Consumer, Producer
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(60)


def ctl(node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from pzq.cli.ctl import ctl_main; "
                           "sys.exit(ctl_main())", "--dsn", node.monitor_dsn, *args],
                          capture_output=True, text=True, timeout=30)


# On a daemon: pzq-ctl runs as a user runs it.
def test_poison_message_moves_to_dead_letters_and_can_be_requeued(start_node, context):
    node = start_node("--max-deliveries", "2", "--ack-timeout", "300000",
                      "--reaper-frequency", "50000", "--delivery-headers")
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        poison = producer.produce([b"poison"], headers=[b"TOPIC:bad"]).msg_id
        producer.produce([b"fine"])
        seen = []

        def dead() -> bool:
            message = consumer.receive(0.05)
            if message is not None:
                seen.append((message.parts[0], message.deliveries))
                if message.parts[0] == b"fine":
                    message.ack()
            return node.figures()["dead_letters"] == 1
        wait_until(dead, 20, message="the poison message in the dead letters")
        assert [d for body, d in seen if body == b"poison"] == [1, 2]
        figures = node.figures()
        assert figures["messages"] == 0 and figures["dead_lettered"] == 1

        listing = ctl(node, "dead")
        assert listing.returncode == 0, listing.stderr
        assert "dead_letters: 1" in listing.stdout
        assert poison.decode() in listing.stdout and "deliveries=2" in listing.stdout
        assert "messages: 0" in ctl(node, "pending").stdout

        assert ctl(node, "requeue", "ALL").stdout.strip() == "requeued: 1"
        again = consumer.receive(10)
        assert again.parts == (b"poison",) and again.deliveries == 1
        assert again.headers["TOPIC"] == "bad"
        again.ack()
        node.wait_figures(lambda f: f["messages"] == 0 and f["dead_letters"] == 0,
                          message="requeued message acked")


# On a daemon: pzq-ctl runs as a user runs it.
def test_purge_and_bad_ctl_requests(start_node, context):
    node = start_node("--max-deliveries", "1", "--ack-timeout", "200000",
                      "--reaper-frequency", "50000")
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        producer.produce([b"poison"])
        consumer.receive(10)  # never acked
        node.wait_figures(lambda f: f["dead_letters"] == 1, message="dead letter")
    key = ctl(node, "dead").stdout.splitlines()[1].split()[0]
    refused = ctl(node, "purge", "ffffffff-0000000000000000")
    assert refused.returncode == 1 and "not a key of this node" in refused.stderr
    malformed = ctl(node, "purge", "not-a-key")  # refused by the tool, naming the argument
    assert malformed.returncode == 2 and "argument key: not-a-key" in malformed.stderr
    assert ctl(node, "purge", key).stdout.strip() == "purged: 1"
    assert node.figures()["dead_letters"] == 0


def test_full_queue_refuses_with_queue_full_and_accepts_again(start_inproc_node, context):
    node = start_inproc_node("--max-messages", "3", consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        acks = [producer.produce([b"%d" % i]) for i in range(5)]
        assert [ack.ok for ack in acks] == [True, True, True, False, False]
        assert acks[3].status_message == b"QUEUE_FULL"
        assert node.figures()["queue_full"] == 2
        consumer.receive(10).ack()
        node.wait_figures(lambda f: f["messages"] == 2, message="room again")
        assert producer.produce([b"again"]).ok


def test_byte_limit_refuses_too(start_inproc_node, context):
    node = start_inproc_node("--max-bytes", "2000", consume=False, tcp=True)
    with Producer(node.receive_dsn, context=context) as producer:
        results = [producer.produce([b"x" * 500]).ok for _ in range(6)]
    assert results[:3] == [True] * 3 and results[-1] is False
