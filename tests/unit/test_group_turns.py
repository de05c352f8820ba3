"""The order of the named groups in a delivery pass: the group served least recently
goes first (a node's loop on inproc endpoints, driven wake by wake). In a fixed order
the first group's batch went out first in every wake, its ACK came back first and got
a wake of its own while the others' were on the way: of three groups draining one
topic at once, the last drained slowest."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.protocol import consume as consume_wire
from pzq.protocol import frames
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.named_groups import served_last
from tests.support.devices import wake_until

pytestmark = pytest.mark.timeout(30)
GROUPS = (b"g1", b"g2", b"g3")


def test_the_groups_served_go_last_in_the_order_served():
    groups = dict.fromkeys((1, 2, 3, 4))  # ids -> (the deliveries, unused here)
    served_last(groups, [3, 1])  # type: ignore[arg-type]
    assert list(groups) == [2, 4, 3, 1]
    served_last(groups, [])  # type: ignore[arg-type]
    assert list(groups) == [2, 4, 3, 1]


def delivered(client: zmq.Socket) -> bytes:
    """The key of the next delivery the client holds (heartbeats and CONSUMING passed)."""
    while client.poll(5000):
        message = consume_wire.decode_node_message(client.recv_multipart())
        assert message.verb != consume_wire.ERROR, message.error
        if message.verb == consume_wire.DELIVER:
            return message.key
    raise AssertionError("no delivery within 5 s")


def order(consume: ConsumeEndpoint) -> list[str]:
    return [deliveries.name for deliveries in consume.groups.values()]


def test_a_group_served_in_a_wake_of_its_own_goes_after_the_others(
        open_device: Callable[..., Device], context: zmq.Context):
    device = open_device(roles=("receive", "consume"))
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    consume.topics.topic("orders", Now.read().wall_us)  # as a first message makes it
    producer = context.socket(zmq.DEALER)
    producer.connect(device.bound()["receive"])
    clients = {name: context.socket(zmq.DEALER) for name in GROUPS}
    try:
        for name, client in clients.items():  # one message out at a time: window 1
            client.connect(device.bound()["consume"])
            client.send_multipart([consume_wire.CONSUME, b"orders", name, b"1",
                                   b"START:earliest"])
            wake_until(device, lambda c=client: c.poll(0) != 0, "CONSUMING")
            assert client.recv_multipart()[0] == consume_wire.CONSUMING
        for n in range(4):
            producer.send_multipart(frames.encode_produce(b"%d" % n, [b"m%d" % n],
                                                          (b"TOPIC:orders",)))
        wake_until(device, lambda: all(c.poll(0) for c in clients.values()),
                   "a delivery to each group")
        held = {name: delivered(client) for name, client in clients.items()}
        assert order(consume) == ["g1", "g2", "g3"]  # each served once, in turn
        clients[b"g1"].send_multipart([consume_wire.ACK, held[b"g1"]])
        wake_until(device, lambda: clients[b"g1"].poll(0) != 0, "g1's next delivery")
        held[b"g1"] = delivered(clients[b"g1"])
        assert order(consume) == ["g2", "g3", "g1"]  # g1 was served alone: it waits
        for name in (b"g3", b"g1", b"g2"):  # one wake reads the three ACKs
            clients[name].send_multipart([consume_wire.ACK, held[name]])
        wake_until(device, lambda: all(c.poll(0) for c in clients.values()),
                   "the next delivery to each group")
        assert order(consume) == ["g2", "g3", "g1"]  # served in that order again
    finally:
        producer.close(0)
        for client in clients.values():
            client.close(0)
