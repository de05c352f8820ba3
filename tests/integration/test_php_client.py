"""The original pzq's own PHP client (``php-api/`` of mkoppanen/pzq), unchanged, against
a real node: opt in with ``PZQ_PHP_API`` naming that folder, and ``php`` with the zmq
extension (Debian: ``php-cli php-zmq``) on the PATH. With ``PZQ_ORIGINAL`` too (the C++
original's binary), every test that needs no option of pzq's own runs against the
original as well: what the client does against pzq, it does against the original.

The driver (``tests/support/php_client_driver.php``) includes the client's
``PZQClient.php`` and calls only its public API, as the client's own examples do;
every PHP warning or notice fails it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pzq.bench.nodes import STOP_TIMEOUT
from pzq.protocol.produce_batches import FRAME_ROOM
from tests.support.harness import NodeProcess, wait_until
from tests.support.original_node import OriginalDaemon
from tests.support.ports import port_below_ephemeral

DRIVER = Path(__file__).parents[1] / "support" / "php_client_driver.php"
PHP_API = os.environ.get("PZQ_PHP_API", "")
ORIGINAL = os.environ.get("PZQ_ORIGINAL", "")


def _why_not_runnable() -> str | None:
    if not PHP_API:
        return ("set PZQ_PHP_API to the original pzq's php-api folder (beside the build "
                "of scripts/build-original) to run its PHP client")
    if not (Path(PHP_API) / "PZQClient.php").is_file():
        return f"PZQ_PHP_API={PHP_API} holds no PZQClient.php"
    if shutil.which("php") is None:
        return "PZQ_PHP_API is set but php is not installed (apt-get install php-cli php-zmq)"
    modules = subprocess.run(["php", "-m"], capture_output=True, text=True, timeout=30)
    if "zmq" not in modules.stdout.split():
        return "PZQ_PHP_API is set but php has no zmq extension (apt-get install php-zmq)"
    return None


WHY_NOT = _why_not_runnable()

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]


Node = NodeProcess | OriginalDaemon
NODE_OPTIONS = ("--ack-timeout", "1000000", "--reaper-frequency", "100000")  # µs


@pytest.fixture(params=["pzq", "original"])
def start_target(request: pytest.FixtureRequest, start_node: Callable[..., NodeProcess],
                 tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Start pzq daemons, or (``original``) the C++ original's, with the original's
    options (times in microseconds, which pzq takes too)."""
    if request.param == "pzq":
        yield start_node
        return
    if not ORIGINAL:
        pytest.skip("set PZQ_ORIGINAL to the original's binary to run the PHP client "
                    "against it too (scripts/build-original builds one)")
    started: list[OriginalDaemon] = []

    def start(*options: str) -> OriginalDaemon:
        node = OriginalDaemon(Path(ORIGINAL), tmp_path / f"original{len(started)}", *options)
        started.append(node)
        return node.start()

    yield start
    for node in started:
        if node.process is not None and node.process.poll() is None:
            node.resume()
            node.kill()
            node.process.wait(STOP_TIMEOUT)


@pytest.fixture
def node(start_target: Callable[..., Node]) -> Node:
    return start_target(*NODE_OPTIONS)


class PhpRun:
    """The driver running ``command``, the request on its stdin; its JSON lines are
    read as they come (a driver never waits on a full pipe), its stderr kept."""

    def __init__(self, command: str, request: dict[str, Any]) -> None:
        with tempfile.TemporaryFile("w+") as stdin:
            json.dump(request, stdin)
            stdin.seek(0)
            self.process = subprocess.Popen(["php", str(DRIVER), PHP_API, command],
                                            text=True, stdin=stdin, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
        self.lines: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(stream, keep), daemon=True)
                        for stream, keep in ((self.process.stdout, self._said),
                                             (self.process.stderr, self.stderr.append))]
        for reader in self.readers:
            reader.start()

    def _said(self, line: str) -> None:
        self.lines.append(json.loads(line))

    @staticmethod
    def _read(stream: Any, keep: Callable[[str], None]) -> None:
        for line in stream:
            if line.strip():
                keep(line)

    def wait_lines(self, count: int, timeout: float = 30) -> None:
        wait_until(lambda: len(self.lines) >= count or self.process.poll() is not None,
                   timeout, message=f"{count} lines from the PHP driver")
        assert len(self.lines) >= count, (self.process.returncode, self.lines[-3:])

    def finish(self, *, fails: bool = False, timeout: float = 60) -> list[dict[str, Any]]:
        """Its lines once it exits: 0, or 3 when ``fails``. Killed if it has not ended
        within ``timeout``."""
        try:
            self.process.wait(timeout)
        finally:
            self.stop()
        assert not self.stderr, "".join(self.stderr)
        assert self.process.returncode == (3 if fails else 0), (self.process.returncode,
                                                                self.lines[-3:])
        return self.lines

    def stop(self) -> list[dict[str, Any]]:
        """SIGTERM unless it has ended; the lines it said."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(10)
        for reader in self.readers:
            reader.join(10)
        return self.lines


def php(command: str, request: dict[str, Any], *, fails: bool = False) -> list[dict[str, Any]]:
    """One run of the driver; its JSON lines."""
    return PhpRun(command, request).finish(fails=fails)


def hexed(*parts: bytes) -> list[str]:
    return [part.hex() for part in parts]


def produce(node: Node, bodies: list[list[bytes]], *, fails: bool = False,
            **options: Any) -> list[dict[str, Any]]:
    """The PHP producer sends each body (a list of one part goes as a string, as
    producer.php sends it), its id ``php-<n>``."""
    messages = [{"id": b"php-%d" % i, "parts": parts, "one_part": len(parts) == 1}
                for i, parts in enumerate(bodies)]
    request = {"dsn": node.receive_dsn, "timeout_ms": 10_000, **options,
               "messages": [{**m, "id": m["id"].hex(), "parts": hexed(*m["parts"])}
                            for m in messages]}
    return php("produce", request, fails=fails)


def consume(node: Node, fails: bool = False, **options: Any) -> list[dict[str, Any]]:
    """The PHP consumer; each delivery's parts back as bytes."""
    request = {"dsn": node.send_dsn, "ack": "1", "filter_expired": True,
               "deadline_ms": 20_000, **options}
    lines = php("consume", request, fails=fails)
    for line in lines:
        if "parts" in line:
            line["parts"] = [bytes.fromhex(part) for part in line["parts"]]
    return lines


def php_monitor(node: Node) -> dict[str, str]:
    (stats,) = php("monitor", {"dsn": node.monitor_dsn})
    return stats


def test_produce_consume_ack_and_monitor(node):
    bodies = ([[b"one part %d" % i] for i in range(6)]
              + [[b"part one %d" % i, b"\x00\xff binary", b""] for i in range(6)])
    assert produce(node, bodies) == [{"produced": (b"php-%d" % i).hex()}
                                     for i in range(len(bodies))]
    started = time.time()
    delivered = consume(node, count=len(bodies))
    assert [line["parts"] for line in delivered] == bodies
    assert len({line["id"] for line in delivered}) == len(bodies)
    for line in delivered:
        assert line["ack_timeout"] == "1000000" and not line["expired"]
        assert abs(int(line["sent"]) / 1e6 - started) < 30, line["sent"]
    node.wait_figures(lambda f: f["messages"] == f["messages_inflight"] == 0,
                      message="the PHP consumer's ACKs applied")

    stats = php_monitor(node)
    figures = node.figures()
    for key in ("messages", "messages_inflight", "db_size", "inflight_db_size", "syncs",
                "expired_messages"):
        assert stats[key].isdigit(), (key, stats[key])
    assert stats["messages"] == stats["messages_inflight"] == "0"
    assert set(stats) == set(figures), "the PHP monitor read every line"
    if isinstance(node, NodeProcess):  # pzq's lines after the original's
        assert stats["delivered"] == stats["acked"] == str(len(bodies))


def test_many_parts_and_a_large_one(node):
    bodies = [[b"part %d" % i for i in range(200)], [bytes(range(256)) * (4 << 12)]]  # 4 MB
    produce(node, bodies)
    assert [m["parts"] for m in consume(node, count=2)] == bodies


def test_a_refusal_reaches_the_php_producer_with_its_reason(node):
    (line,) = produce(node, [[]], fails=True)  # a message without a part
    reason = ("message has no body part after the empty frame" if isinstance(node, NodeProcess)
              else "Trying to save empty message")
    assert line == {"id": b"php-0".hex(),
                    "error": f"Remote peer failed to handle message ({reason})"}


def test_a_body_over_the_limit_reaches_the_php_producer_with_its_reason(start_node):
    """--max-message-size is pzq's own (the original reads any size): its refusal is an
    ordinary ACK 0 with the reason in frame 3, which the client shows."""
    node = start_node(*NODE_OPTIONS, "--max-message-size", "1000")
    produce(node, [[b"x" * 1000]])
    (line,) = produce(node, [[b"x" * 1001]], fails=True)
    assert line == {"id": b"php-0".hex(), "error": "Remote peer failed to handle message "
                    "(message body of 1001 bytes exceeds the limit of 1000 bytes)"}


def test_a_full_queue_reaches_the_php_producer_as_queue_full(start_node):
    """--max-messages is pzq's own: a message over it is refused with an ACK 0 and
    QUEUE_FULL in frame 3, which the client shows; a consumer's ACK makes room again."""
    node = start_node(*NODE_OPTIONS, "--max-messages", "2")
    produce(node, [[b"first"], [b"second"]])
    (line,) = produce(node, [[b"third"]], fails=True)
    assert line == {"id": b"php-0".hex(),
                    "error": "Remote peer failed to handle message (QUEUE_FULL)"}
    assert [m["parts"] for m in consume(node, count=1)] == [[b"first"]]
    node.wait_figures(lambda f: f["messages"] == 1, message="the PHP consumer's ACK applied")
    produce(node, [[b"third"]])


def test_a_frame_over_the_cap_times_the_php_producer_out_and_the_next_is_stored(start_node):
    """A frame over --max-frame-size is never read: ZeroMQ closes the connection, and
    the client, told nothing, says ACK timeout; it reconnects by itself."""
    frame_max = 1000 + FRAME_ROOM
    node = start_node(*NODE_OPTIONS, "--max-message-size", "1000",
                      "--max-frame-size", str(frame_max))
    (line,) = produce(node, [[b"x" * (frame_max + 1)]], fails=True, timeout_ms=2000)
    assert line == {"id": b"php-0".hex(), "error": "ACK timeout"}
    produce(node, [[b"the next"]])
    assert [m["parts"] for m in consume(node, count=1)] == [[b"the next"]]


def test_a_message_without_an_id(node):
    """A PZQMessage never given set_id() goes with an empty id frame, and its ACK
    matches it (the client compares ids with !=: null and "" are equal)."""
    request = {"dsn": node.receive_dsn, "timeout_ms": 10_000,
               "messages": [{"id": None, "parts": [b"no id".hex()], "one_part": True}]}
    assert php("produce", request) == [{"produced": None}]
    assert [m["parts"] for m in consume(node, count=1)] == [[b"no id"]]


def test_the_php_producer_takes_replication_failed_as_stored(start_node):
    """Status 1 with REPLICATION_FAILED (its only peer is down) is a success to the
    client, as from the original: it reads the status message only with status 0."""
    here, peer = (f"tcp://127.0.0.1:{port_below_ephemeral()}" for _ in range(2))
    # --timeout-nodes 1 s: a node of a cluster delivers once it has heard from its
    # peers or given up on them (docs/cluster.rst), by default after 10 s.
    node = start_node(*NODE_OPTIONS, "--broadcast-dsn", here, "--nodes", peer,
                      "--replicas", "1", "--timeout-nodes", "1000000")
    produce(node, [[b"one copy"]])
    assert node.figures()["acks_replication_failed"] == 1
    assert [m["parts"] for m in consume(node, count=1)] == [[b"one copy"]]


def test_with_delivery_headers_the_php_consumer_takes_them_for_the_body(start_node):
    """The original's README says clients should expect header frames before the empty
    one; its own consumer takes the body from frame 5 on whatever comes. So pzq sends
    header frames only when asked (--delivery-headers), and this client cannot use them."""
    node = start_node(*NODE_OPTIONS, "--delivery-headers")
    produce(node, [[b"body"]])
    assert [m["parts"] for m in consume(node, count=1)] == [[b"", b"body"]]


def test_the_php_producer_times_out_on_a_stopped_node_and_the_message_is_stored(node):
    node.pause()
    try:
        running = PhpRun("produce", {
            "dsn": node.receive_dsn, "timeout_ms": 300,
            "messages": [{"id": b"php-0".hex(), "parts": [b"while stopped".hex()],
                          "one_part": True}]})
        running.wait_lines(1)
    finally:
        node.resume()
    assert running.lines[0]["error"] == "ACK timeout"
    # Its message, never sent to the stopped node, held the PHP process at its exit
    # (ZeroMQ's linger) until the node was back: then it went, and was stored.
    running.finish(fails=True)
    node.wait_figures(lambda f: f["messages"] == 1, message="the message stored on resuming")
    assert [m["parts"] for m in consume(node, count=1)] == [[b"while stopped"]]


def test_after_an_ack_timeout_the_next_produce_reads_the_late_ack(node):
    """The client's own pitfall: a producer that goes on after an ACK timeout reads
    the late ACK of the message before as its next one's, and throws; both stored."""
    node.pause()
    try:
        running = PhpRun("produce", {
            "dsn": node.receive_dsn, "timeout_ms": 300, "keep_going": True,
            "messages": [{"id": b"first".hex(), "parts": [b"first".hex()], "one_part": True},
                         {"id": b"second".hex(), "parts": [b"second".hex()], "one_part": True,
                          "timeout_ms": 20_000}]})
        running.wait_lines(1)
    finally:
        node.resume()
    assert running.finish() == [{"id": b"first".hex(), "error": "ACK timeout"},
                                {"id": b"second".hex(), "error": "Got ACK for wrong message"}]
    node.wait_figures(lambda f: f["messages"] == 2, message="both stored")


def test_a_php_producer_that_ignores_acks_and_connects_later(node):
    bodies = [[b"fire and forget %d" % i] for i in range(20)]
    produce(node, bodies, ignore_ack=True, connect_later=True)
    node.wait_figures(lambda f: f["messages"] == 20, message="20 stored")
    assert [m["parts"] for m in consume(node, count=20)] == bodies


def test_a_php_consumer_that_does_not_ack_gets_the_messages_again(node):
    bodies = [[b"redeliver %d" % i] for i in range(3)]
    produce(node, bodies)
    lines = consume(node, count=3, ack="none", again=True)
    first = [line for line in lines if line["round"] == 1]
    second = [line for line in lines if line["round"] == 2]
    assert [m["parts"] for m in first] == bodies
    assert sorted(m["id"] for m in second) == sorted(m["id"] for m in first)
    # Each copy goes out with its own sent time, so the client does not drop it as
    # expired: at least the ack timeout (1 s) after the first.
    assert min(int(m["sent"]) for m in second) - max(int(m["sent"]) for m in first) >= 900_000
    figures = node.wait_figures(lambda f: f["messages"] == 0, message="the copies ACKed")
    assert figures["expired_messages"] >= 3


def test_a_php_nack_gives_the_messages_back_at_once(start_target):
    node = start_target("--ack-timeout", "60000000")
    bodies = [[b"nack %d" % i] for i in range(3)]
    produce(node, bodies)
    started = time.monotonic()
    lines = consume(node, count=3, ack="0", again=True)
    assert time.monotonic() - started < 30, "given back only at the 60 s ack timeout"
    first = [line for line in lines if line["round"] == 1]
    second = [line for line in lines if line["round"] == 2]
    assert [m["parts"] for m in first] == [m["parts"] for m in second] == bodies
    assert [m["id"] for m in second] == [m["id"] for m in first]
    node.wait_figures(lambda f: f["messages"] == 0, message="ACKed")


def test_a_slow_php_consumer_drops_stale_copies_and_takes_fresh_ones(start_target):
    node = start_target(*NODE_OPTIONS)
    bodies = [[b"slow %d" % i] for i in range(3)]
    produce(node, bodies)
    # The copies age in the consumer's socket past the ack timeout: consume() drops
    # them (its is_expired) without an ACK, and returns the copies the node sent again.
    lines = consume(node, want=[parts[0].hex() for parts in bodies], stale_ms=2_500)
    assert {tuple(m["parts"]) for m in lines} == {tuple(parts) for parts in bodies}
    assert not any(m["expired"] for m in lines)
    figures = node.wait_figures(lambda f: f["messages"] == 0, message="the copies ACKed")
    assert figures["expired_messages"] >= 3


def test_a_php_consumer_without_the_filter_gets_stale_copies(node):
    produce(node, [[b"stale"]])
    (line,) = consume(node, count=1, stale_ms=1_500, filter_expired=False)
    assert line["parts"] == [b"stale"] and line["expired"]


def test_every_message_the_php_producer_had_acked_is_delivered_after_a_sigkill(node):
    bodies = [[b"before the kill %03d" % i, b"two"] for i in range(30)]
    produce(node, bodies)
    node.kill()
    node.restart()
    lines = consume(node, want=[parts[0].hex() for parts in bodies])
    assert {tuple(m["parts"]) for m in lines} == {tuple(parts) for parts in bodies}
    node.wait_figures(lambda f: f["messages"] == 0, message="all ACKed after the restart")


def test_a_php_producer_killed_under_keeps_what_it_had_acked(node):
    """SIGKILL while the PHP producer is producing: it stops at its ACK timeout, and
    every message it had its ACK for comes to the PHP consumer after the restart."""
    names = [(b"k-%04d" % i).hex() for i in range(5_000)]
    running = PhpRun("produce", {
        "dsn": node.receive_dsn, "timeout_ms": 1_000,
        "messages": [{"id": name, "parts": [name], "one_part": True} for name in names]})
    try:
        running.wait_lines(200)
        node.kill()
    finally:
        lines = running.finish(fails=True)
    assert lines[-1]["error"] == "ACK timeout", lines[-1]
    acked = [line["produced"] for line in lines[:-1]]
    assert 200 <= len(acked) < len(names)
    node.restart()
    delivered = consume(node, want=acked)
    assert {m["parts"][0].hex() for m in delivered} >= set(acked)


def test_running_php_clients_carry_on_across_a_node_restart(node):
    """A consumer and a producer that run on while their node is SIGKILLed and
    restarted: the producer's message out at the kill ends in ACK timeout, it goes
    on with the next one, and the consumer, never restarted, gets every message the
    producer had an ACK for."""
    names = [(b"r-%04d" % i).hex() for i in range(3_000)]
    producing = PhpRun("produce", {
        "dsn": node.receive_dsn, "timeout_ms": 1_000, "keep_going": True,
        "messages": [{"id": name, "parts": [name], "one_part": True} for name in names]})
    consuming = PhpRun("consume", {"dsn": node.send_dsn, "ack": "1", "count": 10**6,
                                   "filter_expired": True, "deadline_ms": 100_000})
    try:
        producing.wait_lines(300)
        node.kill()
        node.restart()
        produced = producing.finish()
        # Every stored message consumed and ACKed: the consumer has had them all.
        node.wait_figures(lambda f: f["messages"] == 0, 60, message="all consumed")
    finally:
        producing.stop()
        consumed = consuming.stop()
    acked = {line["produced"] for line in produced if "produced" in line}
    timed_out = [line for line in produced if "error" in line]
    assert timed_out and all(line["error"] == "ACK timeout" for line in timed_out)
    assert len(acked) + len(timed_out) == len(names)
    delivered = {m["parts"][0] for m in consumed}
    assert acked <= delivered, f"{len(acked - delivered)} ACKed messages not delivered"
