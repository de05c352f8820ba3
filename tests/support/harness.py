"""Test helpers: daemons with the conveniences tests need, polling with a deadline,
one-shot runs of the daemon."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pzq.bench.nodes import NodeProcess as BenchNode
from pzq.bench.nodes import wait_until
from pzq.client import Consumer, Producer, monitor_figures, request_monitor
from tests.support.ports import port_below_ephemeral

__all__ = ["NodeProcess", "NodeWaits", "wait_until", "run_pzq", "shown_on_failure"]


class NodeWaits:
    """What tests wait for and set up on a node, daemon or in process, through the
    node's own ``stats``, ``figures`` and ``ask``."""

    stats: Callable[[], dict[str, Any]]
    figures: Callable[[], dict[str, int | str]]
    ask: Callable[[str], str]

    def wait_stats(self, condition: Callable[[dict], bool], timeout: float = 10.0,
                   message: str = "STATS figures") -> dict:
        return wait_until(lambda: (lambda f: f if condition(f) else None)(self.stats()),
                          timeout, message=message)

    def wait_archive_durable(self, timeout: float = 10.0) -> dict:
        """STATS once the archive's last fsync covers every topic's end: a FETCH hands
        out only that much (as ZPER's reader does)."""
        return self.wait_stats(lambda s: all(
            topic["flushed_offset"] == topic["last_offset"]
            for topic in s["archive"]["topics"].values()), timeout, "the archive's fsync")

    def wait_figures(self, condition: Callable[[dict], bool], timeout: float = 10.0,
                     message: str = "monitor figures") -> dict:
        return wait_until(lambda: (lambda f: f if condition(f) else None)(self.figures()),
                          timeout, message=message)

    def keep_default(self, topic: str = "orders") -> None:
        """--send-dsn reads every message of the topic beside its named groups."""
        assert self.ask(f"DECLARE TOPIC {topic}").startswith("topic ")
        assert self.ask(f"DECLARE GROUP {topic} default").startswith("group default")


class NodeProcess(NodeWaits, BenchNode):
    """A daemon logging at debug level (a failing test prints its log), with figures to
    poll and SIGSTOP/SIGCONT."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("log_level", "debug")
        super().__init__(*args, **kwargs)
        # Ports of its own below the ephemeral range, not wildcards: a restart binds them
        # again, and no other process's outgoing connection can take one meanwhile.
        self._drawn = [name for name, port in self.ports.items() if port == "*"]
        self._draw_ports()
        self._started = False

    def _draw_ports(self) -> None:
        for name in self._drawn:
            self.ports[name] = str(port_below_ephemeral())

    def start(self) -> NodeProcess:
        """Its first start draws other ports when another program holds one of those
        drawn (a port free when drawn may be taken before the bind); a restart keeps
        them."""
        for attempt in range(3):
            try:
                super().start()
            except RuntimeError as exc:
                if self._started or attempt == 2 or "Address already in use" not in str(exc):
                    raise
                self._draw_ports()
                continue
            self._started = True
            break
        return self

    def figures(self) -> dict[str, int | str]:
        """MONITOR's ``key: value`` lines, numbers as ints."""
        raw = monitor_figures(self.monitor_dsn, timeout=10.0, curve=self.curve)
        return {key: int(value) if value.lstrip("-").isdigit() else value
                for key, value in raw.items()}

    def ask(self, command: str) -> str:
        """One monitor request, answered as text."""
        return request_monitor(self.monitor_dsn, command, timeout=10,
                               curve=self.curve).decode()

    def pause(self) -> None:
        """SIGSTOP, and wait until every thread has stopped: a thread still running
        could read what a test sends next (its ZeroMQ I/O thread, say)."""
        self.process.send_signal(signal.SIGSTOP)
        wait_until(self._stopped, 10, interval=0.005, message="the node stopped")

    def _stopped(self) -> bool:
        tasks = f"/proc/{self.process.pid}/task"
        try:
            states = [Path(tasks, task, "stat").read_text().rsplit(")", 1)[1].split()[0]
                      for task in os.listdir(tasks)]
        except (FileNotFoundError, ProcessLookupError):
            return True  # (gone: nothing of it runs)
        return all(state in "tTZX" for state in states)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)


def shown_on_failure(request: Any) -> list[list[Any]]:
    """The lists of nodes (daemons, in-process nodes, supervisors) a test started whose
    logs it shows when it fails (tests/conftest.py): a fixture appends its list."""
    if not hasattr(request.node, "pzq_nodes"):
        request.node.pzq_nodes = []
    shown: list[list[Any]] = request.node.pzq_nodes
    return shown


def run_pzq(args: Sequence[str], timeout: float = 30.0,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run the daemon to completion (for start-up errors); returns the finished process."""
    return subprocess.run([sys.executable, "-m", "pzq", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **kwargs.pop("env", {})}, **kwargs)


def without_permission_overrides() -> list[str]:
    """The command prefix that makes file permissions count for this test's processes:
    root is let through by its capabilities, so it drops them (setpriv)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: file permissions cannot be made to count")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def produce_and_consume(node, context, count: int, ack_every: int = 1) -> list:
    """``count`` messages to topics even and odd, consumed; every ``ack_every``-th
    acked, the bodies of the others returned."""
    with Producer(node.receive_dsn, context=context) as producer:
        for i in range(count):
            producer.send([b"body %d" % i, b"part two"],
                          headers=[b"TOPIC:%s" % (b"even" if i % 2 == 0 else b"odd")])
        assert all(ack.ok for ack in producer.flush(15))
    kept = []
    with Consumer(node.send_dsn, context=context) as consumer:
        for i in range(count):
            message = consumer.receive(10)
            if i % ack_every == 0:
                message.ack()
            else:
                kept.append(message.parts[0])
    return kept


def produce_until_refused(node, context, start: int, limit: int) -> tuple[set[bytes], list]:
    """Produce 1 kB messages numbered from ``start`` until five are refused (or ``limit``
    were sent); returns the numbers ACKed "1" and the refusals' status messages."""
    acked: set[bytes] = set()
    refused: list[bytes] = []
    with Producer(node.receive_dsn, window=20, context=context) as producer:
        for i in range(start, start + limit):
            ack = producer.produce([b"%06d" % i + b"." * 1000])
            if ack.ok:
                acked.add(b"%06d" % i)
            else:
                refused.append(ack.status_message)
                if len(refused) >= 5:
                    break
    return acked, refused


def consume_all(node, context, wanted: set[bytes], timeout: float = 60) -> set[bytes]:
    """Consume and ack until every one of ``wanted`` came; fail naming what did not."""
    delivered: set[bytes] = set()
    deadline = time.monotonic() + timeout
    with Consumer(node.send_dsn, context=context) as consumer:
        while not wanted <= delivered:
            if time.monotonic() > deadline:
                missing = sorted(wanted - delivered)
                raise AssertionError(f"{len(missing)} ACKed messages not delivered, e.g. "
                                     f"{missing[:5]}")
            message = consumer.receive(0.5)
            if message is not None:
                delivered.add(message.parts[0][:6])
                message.ack()
    return delivered


def scrape_metrics(monitor_dsn: str) -> str:
    """One Prometheus scrape of a node, through an exporter served for it alone."""
    import urllib.request

    from pzq.monitoring import exporter
    running = exporter.serve([monitor_dsn], "127.0.0.1", 0, timeout=2)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics",
                                    timeout=10) as response:
            return response.read().decode()
    finally:
        running.stop()


def unread_bytes(port: int) -> int:
    """Bytes that came to the local TCP port ``port`` and that its process has not
    read (its sockets' receive queues, from /proc/net/tcp)."""
    unread = 0
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                unread += int(fields[4].split(":")[1], 16)
    return unread
