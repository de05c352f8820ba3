"""A key removed from --curve-authorized-keys (SIGHUP) is cut off at once on every
endpoint, with and without --authorization: real daemons, real CURVE keys. ZeroMQ asks
ZAP at the handshake only, so a connection made before the reload went on: a consumer
on --send-dsn and the ZPER subscribers until a restart, and without --authorization
every connection of the key."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq import security
from pzq.client import Consumer, GroupConsumer, Producer
from pzq.protocol import zper as zp
from pzq.security import ClientCurve
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(120)

EVERYTHING = """[default]
produce = ["*"]
consume = ["*:*"]
admin = true
"""
ZPER_FLAGS = {"zper_writer": "--zper-writer-dsn", "zper_ack": "--zper-ack-dsn",
              "zper_relay": "--zper-relay-dsn"}
CUT_WITHIN_S = 10.0


@pytest.fixture(params=["authorization", "no-authorization"])
def node(request, start_node, curve_keys, tmp_path):
    """A node with CURVE, consumer groups and the ZPER endpoints; the client key
    (``gone``) is the one removed, ``kept`` is another admitted key."""
    public, secret = security.generate(tmp_path / "keys", "kept")
    (tmp_path / "authorized" / "kept.key").write_bytes(public.read_bytes())
    kept = ClientCurve(security.load_key_pair(secret), curve_keys["client"].server_public)
    extra: list[str] = []
    if request.param == "authorization":
        rules = tmp_path / "authorization.toml"
        rules.write_text(EVERYTHING)
        extra = ["--authorization", str(rules)]
    wildcards = [part for flag in ZPER_FLAGS.values() for part in (flag, "tcp://127.0.0.1:*")]
    started = start_node(*curve_keys["args"], *extra, "--ack-timeout", "3000000",
                         "--reaper-frequency", "100000", "--archive-dir",
                         str(tmp_path / "archive"), "--flush-messages", "1",
                         "--flush-interval", "50", "--relay-poll", "20", *wildcards,
                         consume=True)
    started.curve = kept
    started.zper = {name: started.event("node_ready")[name] for name in ZPER_FLAGS}
    started.kept, started.gone = kept, curve_keys["client"]
    started.authorized = tmp_path / "authorized"
    return started


class Watched:
    """A client's socket and the handshakes its monitor tells."""

    def __init__(self, name: str, socket: zmq.Socket) -> None:
        self.name, self.socket = name, socket
        self.events = socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                                | zmq.EVENT_DISCONNECTED)
        self.seen: list[int] = []

    def heard(self) -> list[int]:
        while self.events.poll(0):
            self.seen.append(recv_monitor_message(self.events)["event"])
        return self.seen

    def close(self) -> None:
        self.events.close(0)


def zper_relay_client(context, node, curve: ClientCurve) -> zmq.Socket:
    client = context.socket(zmq.DEALER)
    curve.apply(client)
    client.setsockopt(zmq.IDENTITY, zp.make_identity("feed"))
    client.setsockopt(zmq.PROBE_ROUTER, 1)  # announces itself at each (re)connection
    client.setsockopt(zmq.LINGER, 0)
    return client


def zper_ack_subscriber(context, curve: ClientCurve) -> zmq.Socket:
    subscriber = context.socket(zmq.SUB)
    curve.apply(subscriber)
    subscriber.subscribe(b"feed")
    subscriber.setsockopt(zmq.LINGER, 0)
    return subscriber


def monitor_dealer(context, curve: ClientCurve) -> zmq.Socket:
    """One monitor connection kept open, as a dashboard keeps it."""
    dealer = context.socket(zmq.DEALER)
    curve.apply(dealer)
    dealer.setsockopt(zmq.LINGER, 0)
    return dealer


def ping(dealer: zmq.Socket, timeout_ms: int) -> bytes | None:
    """PONG, or None: no answer, or no connection to ask it on."""
    try:
        dealer.send_multipart([b"", b"PING"], zmq.NOBLOCK)
    except zmq.Again:
        return None
    return dealer.recv_multipart()[-1] if dealer.poll(timeout_ms) else None


def produce(producer: Producer, body: bytes, acked: set[bytes]) -> None:
    """To ``orders`` (the group billing's) and ``plain`` (no named group: --send-dsn's,
    which takes what no named group does)."""
    for topic in ("orders", "plain"):
        assert producer.produce([body], topic=topic, timeout=10).ok, (topic, body)
    acked.add(body)


def drain(socket: zmq.Socket) -> None:
    while socket.poll(0):
        socket.recv_multipart()


class KeyClients:
    """One key's client on each endpoint: a producer, a --send-dsn consumer, a consumer
    of orders:billing, a monitor connection, a ZPER relay client and ack subscriber;
    ``watched``: their sockets' monitors (those made before the connect heard its
    handshake)."""

    def __init__(self, node, context, curve: ClientCurve) -> None:
        self.monitor = monitor_dealer(context, curve)
        self.relay = zper_relay_client(context, node, curve)
        self.ack = zper_ack_subscriber(context, curve)
        self.connected_here = [Watched(name, socket) for name, socket in (
            ("monitor", self.monitor), ("relay", self.relay), ("ack", self.ack))]
        self.monitor.connect(node.monitor_dsn)
        self.relay.connect(node.zper["zper_relay"])
        self.ack.connect(node.zper["zper_ack"])
        self.producer = Producer(node.receive_dsn, context=context, curve=curve)
        self.consumer = Consumer(node.send_dsn, context=context, curve=curve)
        self.group = GroupConsumer(node.consume_dsn, "orders", "billing", context=context,
                                   curve=curve, declare=True, window=1)
        self.watched = [Watched("producer", self.producer._socket),
                        Watched("consumer", self.consumer._socket),
                        Watched("group", self.group.socket), *self.connected_here]

    def drain(self) -> None:
        """What came before the cut."""
        for socket in (self.monitor, self.relay, self.ack):
            drain(socket)
        while self.consumer.receive(0) is not None:
            pass

    def close(self) -> None:
        for one in self.watched:
            one.close()
        for socket in (self.monitor, self.relay, self.ack):
            socket.close(0)
        self.producer.close()
        self.consumer.close()
        self.group.close()


def zper_writer(context, node) -> zmq.Socket:
    writer = context.socket(zmq.DEALER)
    node.kept.apply(writer)
    writer.setsockopt(zmq.IDENTITY, zp.make_identity("feed", 2))
    writer.setsockopt(zmq.LINGER, 0)
    writer.connect(node.zper["zper_writer"])
    return writer


def write_until_served(writer: zmq.Socket, kept: KeyClients) -> None:
    """A subscription or a relay client is known again a moment after its handshake:
    records are written (mode 2, each answered) until each of the kept has one."""
    written = 0

    def served() -> bool:
        nonlocal written
        writer.send_multipart([b"zper-%d" % written])
        written += 1
        assert writer.poll(10_000)
        writer.recv_multipart()
        return bool(kept.relay.poll(100) and kept.ack.poll(100))
    wait_until(served, 20, message="the kept ZPER clients served again")


def receive_all(kept: KeyClients, acked: set[bytes]) -> None:
    """Every body ACKed to a producer, received by the kept --send-dsn consumer and the
    kept consumer of orders:billing (what a cut consumer held comes again)."""
    got_default: set[bytes] = set()
    got_billing: set[bytes] = set()

    def received() -> bool:
        message = kept.consumer.receive(0.2)
        if message is not None:
            got_default.add(message.parts[0])
            kept.consumer.ack(message)
        grouped = kept.group.receive(0.2)
        if grouped is not None:
            got_billing.add(grouped.parts[0])
            kept.group.ack(grouped)
        return acked <= got_default and acked <= got_billing
    try:
        wait_until(received, 30, message="every message ACKed delivered")
    except TimeoutError:
        raise AssertionError(f"not delivered: --send-dsn {sorted(acked - got_default)}, "
                             f"billing {sorted(acked - got_billing)}") from None


def test_a_removed_keys_connections_are_cut_on_every_endpoint(node, context):
    """The removed key's producer, --send-dsn consumer, group consumer, monitor
    connection, ZPER relay client and ack subscriber each have their connection cut and
    their handshake refused; the kept key's on the same endpoints go on, and every
    message ACKed to a producer is delivered."""
    kept = KeyClients(node, context, node.kept)
    gone = KeyClients(node, context, node.gone)
    writer = zper_writer(context, node)
    acked: set[bytes] = set()
    try:
        for who, clients in (("kept", kept), ("gone", gone)):
            assert ping(clients.monitor, 10_000) == b"PONG"
            produce(clients.producer, who.encode() + b"-before", acked)
        connected_here = kept.connected_here + gone.connected_here
        wait_until(lambda: all(zmq.EVENT_HANDSHAKE_SUCCEEDED in one.heard()
                               for one in connected_here), 10, message="every handshake")
        node.wait_stats(lambda s: s["consumers_connected"] == 2
                        and s["zper"]["relay"]["clients"] == 2
                        and s["zper"]["ack"]["subscriptions"] == 1,
                        message="the consumers and ZPER clients counted")

        (node.authorized / "client.key").unlink()
        node.process.send_signal(signal.SIGHUP)
        cut = wait_until(lambda: node.event("curve_connections_cut"), 10, message="the cut")
        assert cut["removed"] == 1
        for endpoint in ("receive", "send", "consume", "monitor", "zper_relay", "zper_ack"):
            assert cut["by_endpoint"][endpoint] >= 2, endpoint  # both keys' clients
        assert cut["connections"] == sum(cut["by_endpoint"].values())
        wait_until(lambda: all(zmq.EVENT_DISCONNECTED in one.heard()
                               and zmq.EVENT_HANDSHAKE_FAILED_AUTH in one.heard()
                               for one in gone.watched), CUT_WITHIN_S,
                   message="each of the removed key's connections cut and refused")
        gone.drain()

        # the kept key's clients connect again and go on
        assert wait_until(lambda: ping(kept.monitor, 500), 10, message="PONG") == b"PONG"
        for n in range(10):
            produce(kept.producer, b"after-%d" % n, acked)
        write_until_served(writer, kept)
        receive_all(kept, acked)

        # the removed key's clients got nothing after the cut, and are refused still
        for socket in (gone.monitor, gone.relay, gone.ack):
            assert not socket.poll(0)
        assert gone.consumer.receive(0) is None
        assert ping(gone.monitor, 500) is None
        with pytest.raises(TimeoutError):
            gone.producer.produce([b"refused"], topic="orders", timeout=1.5)
    finally:
        writer.close(0)
        kept.close()
        gone.close()
    assert node.figures()["received"] == 2 * len(acked)


def test_a_reload_that_removes_no_key_cuts_nothing(node, context):
    """A reload that only adds a key leaves every connection alone."""
    with Producer(node.receive_dsn, context=context, curve=node.kept) as producer:
        assert producer.produce([b"one"], timeout=10).ok
        public, _ = security.generate(Path(node.authorized).parent / "keys", "added")
        (node.authorized / "added.key").write_bytes(public.read_bytes())
        node.process.send_signal(signal.SIGHUP)
        wait_until(lambda: node.event("curve_keys_reloaded"), 10, message="reloaded")
        assert producer.produce([b"two"], timeout=10).ok
    assert node.event("curve_connections_cut") is None
