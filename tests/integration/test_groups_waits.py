"""A NACK's delay and a group's backoff survive a restart, a SIGTERM or a SIGKILL (real
daemons, real LevelDB): a message given back for later does not come back before its
time because its node restarted; it comes once its time comes; an ACK of it ends the
wait, in the store too."""

from __future__ import annotations

import time
from pathlib import Path

import plyvel
import pytest

from pzq.client import GroupConsumer
from pzq.store import keyspace
from tests.integration.test_groups import FAST, produce
from tests.support.harness import NodeProcess

pytestmark = pytest.mark.timeout(90)
HOUR_S = 3600.0  # a wait no test run outlasts
QUIET_S = 2.0  # how long a consumer of the restarted node looks for what must not come


@pytest.fixture
def node(start_node) -> NodeProcess:
    return start_node(*FAST, "--delivery-headers", consume=True)


def group_figures(node: NodeProcess, name: str = "g") -> dict:
    return node.stats()["topics"]["orders"]["groups"][name]


def waits_stored(database: Path) -> dict[int, int]:
    """seq -> due µs of every wait kept (the node stopped)."""
    db = plyvel.DB(str(database))
    try:
        return {keyspace.seq_at_end(key): int.from_bytes(value, "big")
                for key, value in db.iterator(prefix=keyspace.WAIT_PREFIX)}
    finally:
        db.close()


def stop_by(node: NodeProcess, how: str) -> None:
    node.kill() if how == "SIGKILL" else node.stop()


def nack_for_later(node: NodeProcess, context, delay_s: float) -> tuple[bytes, int]:
    """One message delivered and given back for ``delay_s``: its first part, and the
    time (µs) just before the NACK went (the node's delay counts from a later one)."""
    produce(node, context, [b"later"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None
        given_back_us = time.time_ns() // 1000
        consumer.nack(message, delay=delay_s)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["delayed"] == 1,
                        message="the NACK taken")
    return message.parts[0], given_back_us


def held_an_hour_after_restart(node: NodeProcess, context, wait: str) -> None:
    """The stopped node's one kept wait is due in about an hour, and restarted it holds
    the message back (``wait``: what made it wait, for the failure's words)."""
    (due_us,) = waits_stored(node.database).values()
    assert due_us > time.time_ns() // 1000 + (HOUR_S - 60) * 1e6
    node.restart()
    assert group_figures(node)["delayed"] == 1
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        assert consumer.receive(QUIET_S) is None, f"delivered before its {wait} ended"


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_nack_s_delay_holds_the_message_back_after_a_restart(node, context, how):
    nack_for_later(node, context, HOUR_S)
    stop_by(node, how)  # right after the NACK was taken: nothing else written since
    restarted_us = time.time_ns() // 1000
    held_an_hour_after_restart(node, context, "delay")
    pending = node.ask("PENDING GROUP orders g")
    assert pending.startswith("group g of topic orders: 0 out, 1 waiting"), pending
    assert " waiting consumer=- " in pending
    # its idle time counts from the restart (it said the µs since 1970 as ms)
    idle_ms = int(pending.split(" idle_ms=")[1].split()[0])
    assert idle_ms <= (time.time_ns() // 1000 - restarted_us) // 1000, pending


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_nack_s_delay_ends_on_time_after_a_restart(node, context, how):
    body, given_back_us = nack_for_later(node, context, 4.0)
    stop_by(node, how)
    node.restart()
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        again = consumer.receive(15)
        assert again is not None and list(again.parts) == [body]
        assert again.sent_us - given_back_us >= 4_000_000, "sent before its delay ended"
        assert again.deliveries == 2
        consumer.ack(again)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 1)
    node.stop()
    assert waits_stored(node.database) == {}


def test_a_backoff_s_wait_holds_the_message_back_after_a_sigkill(node, context):
    produce(node, context, [b"slow"])
    declared = node.ask("DECLARE GROUP orders g ack_timeout=1s backoff=1h")
    assert "backoff=3600000000us" in declared, declared
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        assert consumer.receive(10) is not None  # and never answered: its deadline passes
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["delayed"] == 1,
                        message="the deadline found, the backoff begun")
    node.kill()
    held_an_hour_after_restart(node, context, "backoff")


def test_an_ack_of_a_waiting_message_ends_its_wait_for_good(node, context):
    produce(node, context, [b"done after all"])
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        message = consumer.receive(10)
        assert message is not None
        consumer.nack(message, delay=HOUR_S)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["delayed"] == 1)
        consumer.ack(message)  # it finished after all
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["acked"] == 1
                        and s["topics"]["orders"]["groups"]["g"]["delayed"] == 0,
                        message="the waiting message ACKed")
    node.kill()
    assert waits_stored(node.database) == {}  # deleted with the ACK, in its batch
    node.restart()
    assert group_figures(node)["delayed"] == 0
    with GroupConsumer(node.consume_dsn, "orders", "g", context=context) as consumer:
        assert consumer.receive(QUIET_S) is None, "an ACKed message came again"
    assert node.stats()["messages"] == 0


def test_removing_a_group_removes_its_waits(node, context):
    nack_for_later(node, context, HOUR_S)
    assert node.ask("REMOVE GROUP orders g").startswith("removed")
    node.stop()
    assert waits_stored(node.database) == {}


def test_a_seek_past_a_waiting_message_ends_its_wait(node, context):
    nack_for_later(node, context, HOUR_S)
    produce(node, context, [b"next"])
    assert ": 2 now done" in node.ask("SEEK GROUP orders g to=latest")
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["delayed"] == 0)
    node.kill()
    assert waits_stored(node.database) == {}  # deleted with the seek's batch


def test_emptying_a_group_ends_its_waits(node, context):
    nack_for_later(node, context, HOUR_S)
    assert node.ask("EMPTY GROUP orders g").startswith("emptied group g")
    node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["delayed"] == 0)
    node.kill()
    assert waits_stored(node.database) == {}  # deleted with the emptying's batch


def test_a_nack_of_a_delivery_from_before_a_sigkill_leaves_the_new_one_alone(node, context):
    """A key names a message, not a delivery: the consumer's NACK of what it received
    before its node was killed named the delivery the restarted node made since, to
    the same consumer, and gave that one back at once; its NACK with a delay of the
    new one then named nothing out, and the message came again at once (the time
    soak's "again" breach: again in the NACK's millisecond). What the node forgot is
    not NACKed: the new delivery keeps its delay."""
    produce(node, context, [b"twice"])
    with GroupConsumer(node.consume_dsn, "orders", "g", window=1, context=context) as consumer:
        before = consumer.receive(10)
        assert before is not None and before.deliveries == 1
        node.kill()
        node.restart()
        after = consumer.receive(15)  # joined again: the message again, the same key
        assert after is not None and after.key == before.key
        consumer.nack(before)  # (the soak's late NACK of one let expire: its credit)
        consumer.nack(after, delay=HOUR_S)
        node.wait_stats(lambda s: s["topics"]["orders"]["groups"]["g"]["delayed"] == 1,
                        message="the NACK's delay taken")
        assert consumer.receive(QUIET_S) is None, "given back at once by the old NACK"
    assert group_figures(node)["delayed"] == 1
