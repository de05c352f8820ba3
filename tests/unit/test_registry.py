"""The node's parts opened from its options (pzq.node.registry), on inproc endpoints of
a real context and a real store: which parts are on, what they bound, the periodic
ticks they ask for, and that a bind that fails closes what was bound."""

from __future__ import annotations

import pytest
import zmq

from pzq.archive.zper.ack import ZperAckPart
from pzq.archive.zper.relay import ZperRelayPart
from pzq.archive.zper.writer import WritesDurable, ZperWriterPart
from pzq.clock import Now
from pzq.errors import BindError
from pzq.parts import HEARTBEAT, REAP, RELAY_POLL, RETENTION
from pzq.serving.consume_endpoint import ConsumeEndpoint

pytestmark = pytest.mark.timeout(30)


def test_a_plain_node_has_default_and_the_monitor(open_device):
    device = open_device()
    assert set(device.bound()) == {"receive", "send", "monitor"}
    assert device.ticks() == {REAP: 2_500_000}  # --reaper-frequency, 2.5 s by default
    assert not any(isinstance(part, ConsumeEndpoint) for part in device.parts)
    assert "zper" not in device.figures(Now.read())


def test_every_part_on(open_device, tmp_path):
    device = open_device("--archive-dir", str(tmp_path / "archive"), "--relay-poll", "250",
                         roles=("receive", "send", "monitor", "consume", "archive",
                                "zper-writer", "zper-ack", "zper-relay"))
    assert set(device.bound()) == {"receive", "send", "monitor", "consume", "archive",
                                   "zper_writer", "zper_ack", "zper_relay"}
    assert device.ticks() == {REAP: 2_500_000, RETENTION: 60_000_000, RELAY_POLL: 250_000}
    assert any(isinstance(part, ConsumeEndpoint) for part in device.parts)
    assert device.node.hub.heard(WritesDurable)  # the ack publisher acks the writer's writes
    zper = device.figures(Now.read())["zper"]
    assert isinstance(zper, dict) and set(zper) == {"writer", "ack", "relay"}


def test_an_ack_publisher_without_a_writer_publishes_nothing(open_device, tmp_path):
    device = open_device("--archive-dir", str(tmp_path / "archive"),
                         roles=("receive", "send", "monitor", "zper-ack"))
    ack = next(part for part in device.parts if isinstance(part, ZperAckPart))
    assert not ack.durable  # no writes heard of
    assert not any(isinstance(part, (ZperWriterPart, ZperRelayPart)) for part in device.parts)
    assert device.figures(Now.read())["zper"] == {"ack": {"subscriptions": 0, "published": 0,
                                                "dropped": 0, "waiting": 0}}


def test_a_cluster_node_heartbeats(open_device):
    device = open_device("--broadcast-dsn", "inproc://registry-cluster-a",
                         "--nodes", "inproc://registry-cluster-b", "--timeout-nodes", "2s")
    assert "cluster" in device.bound()
    assert device.ticks()[HEARTBEAT] == 500_000  # a quarter of --timeout-nodes


def test_a_bind_that_fails_closes_what_was_bound(open_device, context):
    """The producers' socket, --send-dsn's and its connection monitor were bound before
    --consume-dsn failed: the context fixture fails the test if any is left open."""
    taken = context.socket(zmq.ROUTER)
    try:
        taken.bind("inproc://registry-taken")
        with pytest.raises(BindError, match="--consume-dsn"):
            open_device("--consume-dsn", "inproc://registry-taken")
    finally:
        taken.close(0)
