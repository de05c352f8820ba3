"""A node of a cluster restored from a backup (pzq-ctl backup) while its peers hold
copies of what it stored after the backup: every message ACKed to a producer is
delivered, restored within --timeout-nodes (its peers deliver what it lost), killed
again right after, or restored once the survivors' takeover delivered everything."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pzq.client import Consumer, GroupConsumer, Producer
from tests.support.harness import NodeProcess, wait_until

pytestmark = pytest.mark.timeout(240)

CTL = str(Path(sys.executable).parent / "pzq-ctl")
TIMEOUT_NODES_US = 8_000_000  # room for a restore (a copy, a start) within it
BEFORE, AFTER = 400, 600  # produced before the backup, and after it


def start_three(start_node, tmp_path: Path, consume: bool = False) -> list[NodeProcess]:
    endpoints = [f"ipc://{tmp_path}/node{i}.cluster" for i in range(3)]
    nodes = []
    for endpoint in endpoints:
        others = ",".join(e for e in endpoints if e != endpoint)
        nodes.append(start_node(
            "--broadcast-dsn", endpoint, "--nodes", others, "--replicas", "1",
            "--timeout-nodes", str(TIMEOUT_NODES_US), "--timeout_replication", "5000000",
            "--ack-timeout", "60000000", "--reaper-frequency", "100000", consume=consume))
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    return nodes


def produce(node: NodeProcess, context, first: int, count: int,
            topic: str | None = None) -> set[bytes]:
    """``count`` messages, each ACKed with its copy held by a peer."""
    with Producer(node.receive_dsn, window=50, context=context) as producer:
        for number in range(first, first + count):
            producer.send([b"m%05d" % number], topic=topic)
        acks = producer.flush(60)
    assert len(acks) == count
    assert all(ack.ok and not ack.replication_failed for ack in acks), acks[:3]
    return {b"m%05d" % number for number in range(first, first + count)}


def take_backup(node: NodeProcess, directory: Path) -> None:
    result = subprocess.run([CTL, "backup", str(directory), "--dsn", node.monitor_dsn],
                            capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL, check=False)
    assert result.returncode == 0, result.stderr


def restore(node: NodeProcess, backup: Path, place: Path) -> None:
    """The node started on a copy of the backup, with its other options as before."""
    shutil.copytree(backup, place)
    node.database = place / "store"
    node.restart()
    assert node.event("backup_restored") is not None


class Deliveries:
    """Every node's --send-dsn read and each message ACKed: how often each came."""

    def __init__(self, nodes: list[NodeProcess], context, closing) -> None:
        self.consumers = [closing.enter_context(Consumer(node.send_dsn, context=context))
                          for node in nodes]
        self.counts: dict[bytes, int] = {}
        self.by: dict[bytes, list[int]] = {}  # the consumers (by index) each came to

    def close(self) -> None:
        for consumer in self.consumers:
            consumer.close()

    def until(self, wanted: set[bytes], timeout: float) -> None:
        def all_came() -> bool:
            for index, consumer in enumerate(self.consumers):
                message = consumer.receive(0.01)
                if message is not None:
                    body = message.parts[0]
                    self.counts[body] = self.counts.get(body, 0) + 1
                    self.by.setdefault(body, []).append(index)
                    message.ack()
            return wanted <= self.counts.keys()

        try:
            wait_until(all_came, timeout, interval=0, message="every ACKed message delivered")
        except (AssertionError, TimeoutError) as exc:
            missing = wanted - self.counts.keys()
            raise AssertionError(f"{len(missing)} of {len(wanted)} ACKed messages never "
                                 f"delivered (e.g. {sorted(missing)[:3]})") from exc

    def settle(self, seconds: float) -> None:
        """Read on a while: a message delivered twice would come now."""
        try:
            self.until({b"never"}, seconds)
        except AssertionError:
            pass


def restart_all(nodes: list[NodeProcess]) -> None:
    """The restored node killed right after its start, and its peers with it (one
    killed before what it was told was written forgets it): told again by it, from what
    it kept, until each confirms."""
    for node in nodes:
        node.kill()
    for node in [*nodes[1:], nodes[0]]:
        node.restart()
    assert nodes[0].event("backup_restored") is None  # restored once


@pytest.mark.parametrize("when", ["within_timeout", "killed_again", "after_takeover"])
def test_a_restored_node_loses_no_acked_message_its_peers_hold(start_node, context, closing,
                                                               tmp_path, when):
    nodes = start_three(start_node, tmp_path)
    acked = produce(nodes[0], context, 0, BEFORE)
    take_backup(nodes[0], tmp_path / "backup")
    acked |= produce(nodes[0], context, BEFORE, AFTER)  # in no backup: the peers' copies
    held = sum(node.stats()["replicas_held"] for node in nodes[1:])
    assert held == BEFORE + AFTER
    nodes[0].kill()
    # (consumers from when no node is killed any more: a kill sends what it had out again)
    deliveries = Deliveries(nodes[1:], context, closing)
    if when == "after_takeover":
        # The survivors take it over and deliver everything before it is restored
        deliveries.until(acked, 60)
        for node in nodes[1:]:
            node.wait_stats(lambda s: s["replicas_held"] == 0, 30, "the copies removed")
    restore(nodes[0], tmp_path / "backup", tmp_path / "restored")
    if when == "killed_again":
        deliveries.close()  # (else what it was sent before the kill stays with it)
        restart_all(nodes)
        deliveries = Deliveries(nodes[1:], context, closing)
    deliveries.consumers.append(closing.enter_context(Consumer(nodes[0].send_dsn,
                                                               context=context)))
    # Taken over only after --timeout-nodes of silence
    assert all((node.event("takeover_started") is None) == (when != "after_takeover")
               for node in nodes[1:])
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    # Its new messages, their copies beside those it lost: its own to deliver alone
    acked |= produce(nodes[0], context, BEFORE + AFTER, 50)
    deliveries.until(acked, 90)
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0 and not s["takeovers"], 30,
                        "the copies removed and the takeovers ended")
    nodes[0].wait_figures(lambda f: f["messages"] == 0, 30, "the restored node emptied")
    deliveries.settle(2)
    assert set(deliveries.counts) == acked
    twice = sorted(body for body, count in deliveries.counts.items() if count > 1)
    assert not twice, (f"{len(twice)} delivered more than once, e.g. "
                       f"{[(body, deliveries.by[body]) for body in twice[:3]]}")


def test_a_named_group_gets_what_the_restore_lost_from_the_peers(start_node, context,
                                                                 closing, tmp_path):
    """A topic read by a named group alone: the peers serve that group what the restored
    node lost, on their --consume-dsn, each message once."""
    nodes = start_three(start_node, tmp_path, consume=True)
    for command in ("DECLARE TOPIC orders", "DECLARE GROUP orders g"):
        assert not nodes[0].ask(command).startswith("ERROR")
    acked = produce(nodes[0], context, 0, BEFORE, topic="orders")
    take_backup(nodes[0], tmp_path / "backup")
    acked |= produce(nodes[0], context, BEFORE, AFTER, topic="orders")
    nodes[0].kill()
    restore(nodes[0], tmp_path / "backup", tmp_path / "restored")
    for node in nodes:
        node.wait_stats(lambda s: all(p["state"] == "up" for p in s["peers"]),
                        message="every peer up")
    acked |= produce(nodes[0], context, BEFORE + AFTER, 50, topic="orders")
    # Its group's oldest message and the new ones, read together across its skip of
    # 2**48 seqs (STATS failed with MemoryError, and so did the node's delivery)
    assert nodes[0].stats()["topics"]["orders"]["groups"]["g"]["consumers"] == 0
    origin = nodes[0].event("backup_restored")["node_id"]
    for node in nodes[1:]:  # (a peer knows the group from then on, as in any takeover)
        node.wait_stats(lambda s: s["takeovers"] == [origin], 30, "the restored takeover")
        assert node.stats()["taken_over"][origin]["lost_in_restore"]
    counts: dict[bytes, int] = {}
    consumers = [closing.enter_context(GroupConsumer(node.consume_dsn, "orders", "g",
                                                     context=context)) for node in nodes]

    def all_came() -> bool:
        for consumer in consumers:
            message = consumer.receive(0.01)
            while message is not None:
                counts[message.parts[0]] = counts.get(message.parts[0], 0) + 1
                message.ack()
                message = consumer.receive(0)
        return acked <= counts.keys()

    wait_until(all_came, 90, interval=0, message="every ACKed message delivered to g")
    for node in nodes[1:]:
        node.wait_stats(lambda s: s["replicas_held"] == 0 and not s["takeovers"], 30,
                        "the copies removed and the takeovers ended")
    assert set(counts) == acked
    assert [body for body, count in counts.items() if count > 1] == []
