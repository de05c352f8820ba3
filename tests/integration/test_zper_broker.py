"""The archive as a ZPER broker: ZPWriter, ZPAck and ZPRelay against a real node (in
this process, on loopback ports of its own; a daemon where it is SIGKILLed).

Producers speak as ZPER's own clients do: a ZPER identity (hash, mode, length,
topic, uuid) on a DEALER or REQ socket; what they wrote is read back with ZPER's
reader protocol (OFFSET, FETCH) and ZPER's frame format.
"""

from __future__ import annotations

import time
from functools import partial

import pytest
import zmq

from pzq.archive.format.records import decode_records
from pzq.bench.nodes import wait_until
from pzq.protocol import zper as zp
from tests.support.harness import produce_and_consume

pytestmark = pytest.mark.timeout(60)


FLUSH = ("--flush-messages", "5", "--flush-interval", "100")


@pytest.fixture
def zper_node(start_inproc_node, tmp_path):
    return start_zper_node(partial(start_inproc_node, consume=False, tcp=True), tmp_path,
                           *FLUSH)


def start_zper_node(start_node, tmp_path, *flush_flags: str):
    """A node (``start_node`` starts it, in this process or a daemon) on wildcard ports,
    then the ports bound written into its arguments, so that a restart binds the same
    ones (clients reconnect there)."""
    flags = {"archive": "--archive-dsn", "zper_writer": "--zper-writer-dsn",
             "zper_ack": "--zper-ack-dsn", "zper_relay": "--zper-relay-dsn"}
    wildcards = [part for flag in flags.values() for part in (flag, "tcp://127.0.0.1:*")]
    node = start_node("--archive-dir", str(tmp_path / "archive"), "--segment-size", "4000",
                      *flush_flags, "--relay-poll", "20", *wildcards)
    ready = node.event("node_ready")
    for name, flag in flags.items():
        node.extra_args[node.extra_args.index(flag) + 1] = ready[name]
    node.archive_dir = tmp_path / "archive"
    node.archive_dsn = ready["archive"]
    node.zper = {"writer": ready["zper_writer"], "ack": ready["zper_ack"],
                 "relay": ready["zper_relay"]}
    return node


def producer(open_socket, node, kind: int, topic: str, mode: int) -> zmq.Socket:
    socket = open_socket(kind)
    socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic, mode))
    socket.connect(node.zper["writer"])
    return socket


def fetch_all(open_socket, node, topic: str) -> list[tuple[int, list[bytes]]]:
    """Every record of ``topic`` by ZPER's reader protocol, with its offset, once the
    archive's fsync made them durable (a FETCH hands out no more)."""
    node.wait_archive_durable()
    reader = open_socket(zmq.DEALER)
    reader.setsockopt(zmq.IDENTITY, zp.make_identity(topic))
    reader.connect(node.archive_dsn)

    def ask(*frames: bytes) -> list[bytes]:
        reader.send_multipart(list(frames))
        assert reader.poll(10_000)
        return reader.recv_multipart()

    status, *offsets = ask(b"OFFSET", zp.INT64.pack(zp.EARLIEST))
    assert status[0] == zp.OK
    position = zp.INT64.unpack(offsets[0])[0]
    end = zp.INT64.unpack(ask(b"OFFSET", zp.INT64.pack(zp.LATEST))[-1])[0]
    records = []
    while position < end:
        status, data = ask(b"FETCH", zp.INT64.pack(position), zp.INT64.pack(1 << 20))
        assert status[0] == zp.OK and data
        records += [(position + at, frames) for at, frames in decode_records(data)]
        position += len(data)
    return records


def messages(count: int, size: int = 30) -> list[list[bytes]]:
    """ZPER's advice: the first frame a message id, then the body."""
    return [[b"id-%04d" % n, bytes([65 + n % 26]) * size] for n in range(count)]


def test_mode_0_stores_the_frames_as_they_are(zper_node, open_socket):
    sent = messages(40, size=300)  # long frames too: 8-byte lengths
    writer = producer(open_socket, zper_node, zmq.DEALER, "clicks", 0)
    for frames in sent:
        writer.send_multipart(frames)
    zper_node.wait_stats(lambda s: s["zper"]["writer"]["written"] == 40, message="written")
    zper_node.wait_stats(lambda s: s["archive"]["topics"]["clicks"]["flushed_offset"]
                         == s["archive"]["topics"]["clicks"]["last_offset"], message="flushed")
    assert [frames for _, frames in fetch_all(open_socket, zper_node, "clicks")] == sent
    assert not writer.poll(200), "mode 0 gets no response"
    stats = zper_node.stats()
    assert stats["archive"]["topics"]["clicks"]["raw"] == 1
    assert stats["zper"]["writer"]["written_by_mode"] == [40, 0, 0]
    assert stats["zper"]["writer"]["bytes"] == sum(len(f) for m in sent for f in m)


def test_mode_1_answers_once_writes_are_flushed(zper_node, open_socket):
    sent = messages(23)
    writer = producer(open_socket, zper_node, zmq.DEALER, "orders", 1)
    for frames in sent:
        writer.send_multipart(frames)
    answered: list[bytes] = []
    deadline = time.monotonic() + 10
    while b"id-0022" not in answered:  # the last write's flush (by count or by time)
        assert writer.poll(max(1, int((deadline - time.monotonic()) * 1000))), answered
        (message_id,) = writer.recv_multipart()
        answered.append(message_id)
    assert answered == sorted(answered) and set(answered) <= {m[0] for m in sent}
    assert len(answered) < len(sent), "one response per flush, not per write"
    stats = zper_node.stats()
    assert stats["archive"]["topics"]["orders"]["flushed_offset"] == \
        stats["archive"]["topics"]["orders"]["last_offset"]
    assert [frames for _, frames in fetch_all(open_socket, zper_node, "orders")] == sent


@pytest.mark.parametrize("kind", [zmq.REQ, zmq.DEALER], ids=["req", "dealer"])
def test_mode_2_answers_every_write_once_fsynced(zper_node, open_socket, kind):
    sent = messages(12)
    writer = producer(open_socket, zper_node, kind, "audit", 2)
    for frames in sent:
        writer.send_multipart(frames)
        assert writer.poll(10_000), "mode 2 answers every write"
        assert writer.recv_multipart() == [frames[0]]
        topic = zper_node.stats()["archive"]["topics"]["audit"]
        assert topic["flushed_offset"] == topic["last_offset"]  # durable before answered
    if kind == zmq.DEALER:  # a DEALER may also send the delimiter a REQ would
        writer.send_multipart([b"", b"id-x", b"body"])
        assert writer.poll(10_000) and writer.recv_multipart() == [b"", b"id-x"]
        sent.append([b"id-x", b"body"])
    assert [frames for _, frames in fetch_all(open_socket, zper_node, "audit")] == sent


def bad_identities() -> dict[str, bytes]:
    good = zp.make_identity("orders", 0)
    return {"shape": b"\x05\x00\x03ab",
            "hash": bytes([good[0] ^ 0xFF]) + good[1:],
            "mode": good[:1] + b"\x07" + good[2:]}


def logged(node, name: str, count: int) -> list[dict]:
    """The node's ``name`` log events once ``count`` have come: STATS may count a
    refusal a moment before its log line is read from the node's stderr. More than
    ``count`` is returned as it is, for the test to judge."""
    def found() -> list[dict]:
        return [event for event in list(node.events) if event.get("event") == name]
    wait_until(lambda: len(found()) >= count, 10, message=f"{count} {name} logged")
    return found()


def test_bad_identities_are_refused_logged_once_and_the_node_goes_on(zper_node,
                                                                    open_socket):
    for identity in bad_identities().values():
        bad = open_socket(zmq.DEALER)
        bad.setsockopt(zmq.IDENTITY, identity)
        bad.connect(zper_node.zper["writer"])
        bad.send_multipart([b"id", b"body"])
        bad.send_multipart([b"id", b"body"])
    own = producer(open_socket, zper_node, zmq.DEALER, "default", 0)  # --archive-topic
    own.send_multipart([b"id", b"body"])
    zper_node.wait_stats(lambda s: s["zper"]["writer"]["refused"] == 7, message="refused")
    refusals = logged(zper_node, "zper_write_refused", 4)  # once per producer and reason
    reasons = sorted(e["reason"] for e in refusals)
    assert len(reasons) == 4, reasons
    assert any("is not hash:1 mode:1 length:1" in r for r in reasons)
    assert any("identity hash 0x" in r for r in reasons)
    assert any("identity mode 7 is not 0, 1 or 2" in r for r in reasons)
    assert any("--archive-topic" in r for r in reasons)
    good = producer(open_socket, zper_node, zmq.DEALER, "orders", 2)
    good.send_multipart([b"id-ok", b"body"])
    assert good.poll(10_000) and good.recv_multipart() == [b"id-ok"]
    assert "orders" not in zper_node.stats()["archive"]["topics"] or \
        [f for _, f in fetch_all(open_socket, zper_node, "orders")] == [[b"id-ok", b"body"]]


def test_a_topic_of_pzq_records_is_refused_to_writers_and_kept_apart(zper_node, context,
                                                                     open_socket):
    produce_and_consume(zper_node, context, 4)  # pzq's own topics: even, odd
    zper_node.wait_stats(lambda s: s["archive"]["archived"] == 4, message="archived")
    writer = producer(open_socket, zper_node, zmq.DEALER, "even", 0)
    writer.send_multipart([b"id", b"x"])
    zper_node.wait_stats(lambda s: s["zper"]["writer"]["refused"] == 1, message="refused")
    (event,) = logged(zper_node, "zper_write_refused", 1)
    assert event["reason"] == "topic even holds pzq's archived messages"


def ack_subscriber(open_socket, node, topic: str):
    """A SUB of the node's ZPAck for ``topic``, once the node counts its subscription."""
    subscriber = open_socket(zmq.SUB)
    subscriber.subscribe(topic.encode())
    subscriber.connect(node.zper["ack"])
    node.wait_stats(lambda s: s["zper"]["ack"]["subscriptions"] == 1,
                    message="the subscription")
    return subscriber


def write(open_socket, node, topic: str, sent: list) -> None:
    """``sent`` through a ZPER writer (DEALER, mode 0)."""
    writer = producer(open_socket, node, zmq.DEALER, topic, 0)
    for frames in sent:
        writer.send_multipart(frames)


def test_zpack_offsets_agree_with_fetch(zper_node, open_socket):
    subscriber = ack_subscriber(open_socket, zper_node, "metrics")
    sent = messages(30)
    write(open_socket, zper_node, "metrics", sent)
    acks = []
    while len(acks) < len(sent):
        assert subscriber.poll(10_000), f"{len(acks)} acks"
        acks.append(zp.decode_ack(subscriber.recv_multipart()))
    records = fetch_all(open_socket, zper_node, "metrics")
    assert acks == [("metrics", frames[0], offset) for offset, frames in records]
    assert zper_node.stats()["zper"]["ack"]["published"] == 30


def test_a_subscriber_that_keeps_up_gets_every_ack_of_a_burst(start_inproc_node, tmp_path,
                                                               open_socket):
    """20 000 writes made durable by one timed flush are acked at once, far past
    libzmq's default queue of 1 000: none may be lost, and none is dropped."""
    start_node = partial(start_inproc_node, consume=False, tcp=True)
    node = start_zper_node(start_node, tmp_path, "--flush-messages", "1000000",
                           "--flush-interval", "300", "--segment-size", "1000000")
    subscriber = ack_subscriber(open_socket, node, "burst")
    sent = messages(20_000)
    write(open_socket, node, "burst", sent)
    acks = []
    while len(acks) < len(sent):
        if not subscriber.poll(5_000):
            break
        acks.append(zp.decode_ack(subscriber.recv_multipart()))
    assert len(acks) == len(sent), f"{len(acks)} of {len(sent)} acks"
    ack_stats = node.stats()["zper"]["ack"]
    assert [message_id for _, message_id, _ in acks] == [frames[0] for frames in sent]
    assert [offset for _, _, offset in acks] == \
        [offset for offset, _ in fetch_all(open_socket, node, "burst")]
    assert (ack_stats["published"], ack_stats["dropped"], ack_stats["waiting"]) == \
        (20_000, 0, 0)


def test_acks_a_full_queue_refused_go_out_once_the_subscriber_reads(start_inproc_node,
                                                                   tmp_path, open_socket):
    """A subscriber that reads nothing for a while: past its queue the node keeps the
    acks of one flush (by count, of the last write) and sends them, in order, as the
    subscriber reads; no write comes meanwhile."""
    start_node = partial(start_inproc_node, consume=False, tcp=True)
    node = start_zper_node(start_node, tmp_path, "--flush-messages", "30000",
                           "--flush-interval", "100000", "--segment-size", "100000000")
    subscriber = open_socket(zmq.SUB)
    subscriber.setsockopt(zmq.RCVHWM, 1)
    subscriber.setsockopt(zmq.RCVBUF, 4096)
    subscriber.subscribe(b"slow")
    subscriber.connect(node.zper["ack"])
    node.wait_stats(lambda s: s["zper"]["ack"]["subscriptions"] == 1,
                    message="the subscription")
    ids = [b"%05d" % n + b"i" * 1019 for n in range(30_000)]  # 30 MB of acks
    writer = producer(open_socket, node, zmq.DEALER, "slow", 0)
    for message_id in ids:
        writer.send_multipart([message_id, b"body"])
    node.wait_stats(lambda s: s["zper"]["ack"]["waiting"] > 0, timeout=20,
                    message="acks kept past the subscriber's queue")
    got = []
    while len(got) < len(ids):
        assert subscriber.poll(5_000), f"{len(got)} of {len(ids)} acks"
        got.append(zp.decode_ack(subscriber.recv_multipart())[1])
    assert got == ids
    ack_stats = node.stats()["zper"]["ack"]
    assert (ack_stats["published"], ack_stats["dropped"], ack_stats["waiting"]) == \
        (30_000, 0, 0)


def zper_client_size(frames: list[bytes]) -> int:
    """A record's bytes as ZPER's clients count them: ``data.length > 255 ? 9 : 2``."""
    return sum(len(frame) + (9 if len(frame) > 255 else 2) for frame in frames)


def test_zper_clients_count_the_offsets_of_255_byte_frames(zper_node, open_socket):
    """ZPER's order check with 254/255/256-byte bodies: each next offset a client
    counts is where the next record starts, and the ack names it too."""
    subscriber = open_socket(zmq.SUB)
    subscriber.subscribe(b"sizes")
    subscriber.connect(zper_node.zper["ack"])
    zper_node.wait_stats(lambda s: s["zper"]["ack"]["subscriptions"] == 1,
                         message="the subscription")
    sent = [[b"id-%03d" % n, b"x" * size] for n, size in enumerate([254, 255, 256] * 10)]
    writer = producer(open_socket, zper_node, zmq.DEALER, "sizes", 0)
    for frames in sent:
        writer.send_multipart(frames)
    acks = []
    while len(acks) < len(sent):
        assert subscriber.poll(10_000), f"{len(acks)} acks"
        acks.append(zp.decode_ack(subscriber.recv_multipart()))
    reader = open_socket(zmq.DEALER)
    reader.setsockopt(zmq.IDENTITY, zp.make_identity("sizes"))
    reader.connect(zper_node.archive_dsn)
    position, counted, got = 0, [], []
    while len(got) < len(sent):
        reader.send_multipart([b"FETCH", zp.INT64.pack(position), zp.INT64.pack(700)])
        assert reader.poll(10_000)
        reply = reader.recv_multipart()
        assert reply[0][0] == zp.OK, f"FETCH at the counted offset {position}: {reply}"
        for _, frames in decode_records(reply[1]):
            counted.append(position)
            got.append(frames)
            position += zper_client_size(frames)
    assert got == sent
    assert [offset for _, _, offset in acks] == counted
    end = zper_node.stats()["archive"]["topics"]["sizes"]["last_offset"]
    assert position == end == sum(zper_client_size(frames) for frames in sent)


def relay_client(open_socket, node, topic: str) -> zmq.Socket:
    client = open_socket(zmq.DEALER)
    client.setsockopt(zmq.IDENTITY, zp.make_identity(topic))
    client.setsockopt(zmq.PROBE_ROUTER, 1)  # announce itself on every (re)connection
    client.connect(node.zper["relay"])
    return client


def receive(client: zmq.Socket, count: int) -> list[list[bytes]]:
    got = []
    while len(got) < count:
        assert client.poll(10_000), f"relayed {len(got)} of {count}"
        got.append(client.recv_multipart())
    return got


def test_relay_pushes_new_records_and_goes_on_from_the_end_after_a_restart(zper_node,
                                                                          open_socket):
    writer = producer(open_socket, zper_node, zmq.DEALER, "feed", 2)

    def write(batch: list[list[bytes]]) -> None:
        for frames in batch:
            writer.send_multipart(frames)
            assert writer.poll(10_000)
            writer.recv_multipart()

    before = [[b"old-%d" % n, b"x"] for n in range(5)]
    write(before)
    client = relay_client(open_socket, zper_node, "feed")
    zper_node.wait_stats(lambda s: s["zper"]["relay"]["clients"] == 1, message="client")
    first = messages(10)
    write(first)
    assert receive(client, 10) == first  # nothing from before it connected
    zper_node.stop()
    zper_node.restart()
    assert zper_node.stats()["zper"]["relay"]["known_clients"] == 1  # kept across it
    second = [[b"new-%d" % n, b"y" * n] for n in range(8)]
    write(second)
    assert receive(client, 8) == second  # once its socket reconnected by itself
    assert not client.poll(300)
    stats = zper_node.stats()["zper"]["relay"]
    assert stats["relayed"] == 8 and stats["clients"] == 1


def test_a_relay_client_that_only_connects_is_served_from_its_first_message_on(
        zper_node, open_socket):
    """ZPER's README client connects and only receives. The node cannot know it (a
    ROUTER hears of a peer when it sends; its identity ends in random bytes), so it gets
    nothing until it sends once, as docs/archive.rst says; then it is a client."""
    writer = producer(open_socket, zper_node, zmq.DEALER, "feed", 2)

    def write(batch: list[list[bytes]]) -> None:
        for frames in batch:
            writer.send_multipart(frames)
            assert writer.poll(10_000)
            writer.recv_multipart()

    silent = open_socket(zmq.DEALER)
    silent.setsockopt(zmq.IDENTITY, zp.make_identity("feed"))
    silent.connect(zper_node.zper["relay"])
    announced = relay_client(open_socket, zper_node, "feed")
    zper_node.wait_stats(lambda s: s["zper"]["relay"]["clients"] == 1, message="client")
    unseen = messages(5)
    write(unseen)
    assert receive(announced, 5) == unseen
    assert not silent.poll(200)
    silent.send(b"")  # any message announces it
    zper_node.wait_stats(lambda s: s["zper"]["relay"]["clients"] == 2, message="both")
    seen = [[b"later-%d" % n, b"z"] for n in range(4)]
    write(seen)
    assert receive(silent, 4) == seen and receive(announced, 4) == seen


def test_relay_flow_control_holds_records_for_a_slow_client(zper_node, open_socket):
    client = relay_client(open_socket, zper_node, "bulk")
    client.setsockopt(zmq.RCVHWM, 5)
    zper_node.wait_stats(lambda s: s["zper"]["relay"]["clients"] == 1, message="client")
    sent = messages(3000, size=1000)
    writer = producer(open_socket, zper_node, zmq.DEALER, "bulk", 0)
    for frames in sent:
        writer.send_multipart(frames)
    zper_node.wait_stats(lambda s: s["zper"]["writer"]["written"] == 3000, message="written")
    assert receive(client, 3000) == sent  # read slowly behind a small queue, none lost


def test_figures_in_stats_the_exporter_and_the_status_page_data(zper_node, open_socket):
    import json
    import urllib.request

    from pzq.monitoring import exporter

    subscriber = open_socket(zmq.SUB)
    subscriber.subscribe(b"")
    subscriber.connect(zper_node.zper["ack"])
    client = relay_client(open_socket, zper_node, "clicks")
    zper_node.wait_stats(lambda s: s["zper"]["ack"]["subscriptions"] == 1
                         and s["zper"]["relay"]["clients"] == 1, message="subscriber, client")
    writer = producer(open_socket, zper_node, zmq.DEALER, "clicks", 0)
    for frames in messages(50, size=100):
        writer.send_multipart(frames)
    receive(client, 50)
    # relayed as written, acked once durable: a later wake may publish the last acks
    stats = zper_node.wait_stats(lambda s: s["zper"]["ack"]["published"] == 50,
                                 message="the acks")
    zper, topic = stats["zper"], stats["archive"]["topics"]["clicks"]
    assert zper["writer"]["written"] == 50 and zper["writer"]["bytes"] == 50 * 107
    assert zper["writer"]["messages_per_second_60s"] > 0
    assert zper["writer"]["bytes_per_second_60s"] > 0
    assert zper["relay"]["relayed"] == 50 and topic["bytes"] == topic["last_offset"] > 5000
    running = exporter.serve([zper_node.monitor_dsn], "127.0.0.1", 0, timeout=2,
                             sample_interval=0.2)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics") as response:
            metrics = response.read().decode()
        history = wait_until(lambda: json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{running.port}/api/history").read())["nodes"][0].get("stats"),
            10, message="a sample")
    finally:
        running.stop()
    labels = f'monitor="{zper_node.monitor_dsn}",node="{stats["node_id"]}"'
    assert f"pzq_zper_written_total{{{labels}}} 50.0" in metrics
    assert f"pzq_zper_written_bytes_total{{{labels}}} 5350.0" in metrics
    assert f"pzq_zper_relay_clients{{{labels}}} 1.0" in metrics
    assert f"pzq_zper_ack_subscriptions{{{labels}}} 1.0" in metrics
    assert f"pzq_zper_acks_published_total{{{labels}}} 50.0" in metrics
    assert f"pzq_zper_acks_dropped_total{{{labels}}} 0.0" in metrics
    assert f"pzq_zper_acks_waiting{{{labels}}} 0.0" in metrics
    assert f'pzq_archive_bytes{{{labels},topic="clicks"}} {float(topic["bytes"])}' in metrics
    assert history["zper"]["relay"]["clients"] == 1  # what the status page shows


WRITER_FIGURES = {"messages_per_second_60s": 12.5, "bytes_per_second_60s": 1337.0, "refused": 2}


@pytest.mark.skipif(__import__("shutil").which("node") is None, reason="no node.js")
@pytest.mark.parametrize("zper, line", [
    ({"writer": WRITER_FIGURES, "relay": {"clients": 3}, "ack": {"subscriptions": 1}},
     "ZPER writer 12.5/s, 1.3 KB/s, refused 2; relay clients 3; ack subscriptions 1"),
    # a section for each ZPER endpoint that is on: a writer alone, an ack publisher alone
    ({"writer": WRITER_FIGURES}, "ZPER writer 12.5/s, 1.3 KB/s, refused 2"),
    ({"ack": {"subscriptions": 4}}, "ack subscriptions 4"),
])
def test_status_page_zper_line_in_javascript(tmp_path, zper, line):
    import json
    import re
    import subprocess
    from pathlib import Path

    page = (Path(__file__).parents[2] / "pzq" / "monitoring" / "status.html").read_text()
    script = page[page.index("<script>") + len("<script>"):page.index("</script>")]
    helpers = "\n".join(re.findall(r"^function (?:count|rate|size|zperLine)\(.*?^}\n", script,
                                   re.MULTILINE | re.DOTALL))
    stats = {"archive": {"topics": {"clicks": {"bytes": 5350}}}, "zper": zper}
    program = tmp_path / "line.js"
    program.write_text(helpers + f"\nconsole.log(zperLine({json.dumps(stats)}));\n")
    ran = subprocess.run(["node", str(program)], capture_output=True, text=True, timeout=30,
                         check=False)
    # bytes as pzq-monitor says them (a space, powers of 1000: 5.3 KB, not 5.3kB)
    assert ran.stdout.strip() == "archive: clicks 5.3 KB; " + line, ran.stderr


def test_answered_writes_survive_a_sigkill(start_node, tmp_path, open_socket):
    zper_node = start_zper_node(start_node, tmp_path, *FLUSH)  # a daemon, to be SIGKILLed
    every = producer(open_socket, zper_node, zmq.DEALER, "ledger", 2)
    at_flush = producer(open_socket, zper_node, zmq.DEALER, "journal", 1)
    answered_every = []
    for frames in messages(20):
        every.send_multipart(frames)
        assert every.poll(10_000) and every.recv_multipart() == [frames[0]]
        answered_every.append(frames)
    journal = messages(12)
    for frames in journal:
        at_flush.send_multipart(frames)
    last_answered = b""
    while last_answered != journal[-1][0]:
        assert at_flush.poll(10_000)
        (last_answered,) = at_flush.recv_multipart()
    zper_node.kill()
    zper_node.restart()
    assert [f for _, f in fetch_all(open_socket, zper_node, "ledger")] == answered_every
    assert [f for _, f in fetch_all(open_socket, zper_node, "journal")] == journal


def test_a_relay_client_with_a_bad_identity_is_refused_and_the_node_goes_on(zper_node,
                                                                           open_socket):
    bad = open_socket(zmq.DEALER)
    bad.setsockopt(zmq.IDENTITY, b"\x00\x00\x09not-a-zper-identity")
    bad.connect(zper_node.zper["relay"])
    bad.send(b"")
    bad.send(b"again")
    zper_node.wait_stats(lambda s: s["zper"]["relay"]["refused"] == 2, message="refused")
    (event,) = logged(zper_node, "zper_relay_refused", 1)
    assert "identity is not hash, mode, length, topic" in event["reason"]
    good = relay_client(open_socket, zper_node, "feed")
    zper_node.wait_stats(lambda s: s["zper"]["relay"]["clients"] == 1, message="client")
    writer = producer(open_socket, zper_node, zmq.DEALER, "feed", 0)
    writer.send_multipart([b"id-1", b"x"])
    assert receive(good, 1) == [[b"id-1", b"x"]]
    assert not bad.poll(200)
