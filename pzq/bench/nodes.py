"""Real pzq daemons to measure: subprocesses on loopback wildcard ports.

A NodeProcess starts ``python -P -m pzq``, reads the ``node_ready`` event from its
JSON log to learn the ports, and restarts on the same ones, so clients can
reconnect after a crash (the soak in scripts/ and the tests build on it).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pzq.bench.cpu import cpu_seconds
from pzq.client import request_monitor
from pzq.security import ClientSecurity

T = TypeVar("T")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0
# Nodes started and not stopped by their NodeProcess: killed when the program exits, so a
# run that ends in an exception (or a Ctrl-C sent to it alone) leaves no node running.
_LEFT_RUNNING: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_nodes_left_running() -> None:
    for process in _LEFT_RUNNING:
        if process.poll() is None:
            process.kill()
            process.wait(STOP_TIMEOUT)


def wait_until(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> T:
    """Poll ``condition`` until it returns something true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


class NodeProcess:
    """One pzq daemon. Starts on wildcard ports, and restarts on the same ones."""

    def __init__(self, database: Path, *extra_args: str,
                 preexec_fn: Callable[[], None] | None = None, log_level: str = "info",
                 consume: bool = False, env: dict[str, str] | None = None) -> None:
        self.database = database
        self.log_level = log_level
        self.curve: ClientSecurity | None = None  # a ClientCurve when the node serves CURVE
        self.extra_args = list(extra_args)
        self.preexec_fn = preexec_fn
        self.env = env  # the environment's additions (e.g. PYTHONPATH to another release)
        self.ports = {"receive": "*", "send": "*", "monitor": "*"}
        if consume:
            self.ports["consume"] = "*"  # consumer groups (--consume-dsn)
        self.process: subprocess.Popen[bytes] | None = None
        self.events: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []
        self._reader: threading.Thread | None = None

    # -- endpoints -------------------------------------------------------------

    def dsn(self, name: str) -> str:
        port = self.ports[name]  # a port, or a whole endpoint when it is not tcp
        return port if "://" in port else f"tcp://127.0.0.1:{port}"

    @property
    def receive_dsn(self) -> str:
        return self.dsn("receive")

    @property
    def send_dsn(self) -> str:
        return self.dsn("send")

    @property
    def monitor_dsn(self) -> str:
        return self.dsn("monitor")

    @property
    def consume_dsn(self) -> str:
        return self.dsn("consume")

    # -- life cycle ------------------------------------------------------------

    def command(self) -> list[str]:
        # -P: the working directory is not put on sys.path, so a folder named pzq
        # there (a clone, say) is not imported instead of the installed package.
        return [sys.executable, "-P", "-m", "pzq", "--database", str(self.database),
                "--receive-dsn", self.dsn("receive"), "--send-dsn", self.dsn("send"),
                "--monitor-dsn", self.dsn("monitor"), "--log-format", "json",
                *(["--consume-dsn", self.dsn("consume")] if "consume" in self.ports else []),
                "--log-level", self.log_level, *self.extra_args]

    def start(self) -> NodeProcess:
        self.events, self.stderr_lines = [], []
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        preexec_fn=self.preexec_fn,
                                        env={**os.environ, **(self.env or {})})
        _LEFT_RUNNING.add(self.process)
        reader = threading.Thread(target=self._read_stderr, args=(self.process,), daemon=True)
        reader.start()
        self._reader = reader  # only once started: a stop joins it (a Ctrl-C can come first)
        ready = wait_until(self._ready, START_TIMEOUT, message="node_ready")
        assert ready is not None
        for name in self.ports:
            port = re.search(r"^tcp://.*:(\d+)$", ready[name])
            self.ports[name] = port.group(1) if port else ready[name]
        return self

    def _ready(self) -> dict[str, Any] | None:
        """The node_ready event once it came; RuntimeError if the node exited instead."""
        ready = self.event("node_ready")
        if ready is None and self.process is not None and self.process.poll() is not None:
            if self._reader is not None:
                self._reader.join(5)
            raise RuntimeError(f"pzq exited with {self.process.returncode}: "
                               + "\n".join(self.stderr_lines[-20:]))
        return ready

    def _read_stderr(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stderr_lines.append(line)
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def event(self, name: str) -> dict[str, Any] | None:
        for event in list(self.events):
            if event.get("event") == name:
                return event
        return None

    def cpu_seconds(self) -> float:
        """The node's CPU time so far, user and system, all its threads."""
        assert self.process is not None
        return cpu_seconds(self.process.pid)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing handed back."""
        self._signal_and_wait(signal.SIGKILL)

    def stop(self) -> int:
        """SIGTERM: a graceful stop; returns the exit code."""
        return self._signal_and_wait(signal.SIGTERM)

    def _signal_and_wait(self, signum: int) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(STOP_TIMEOUT)
        _LEFT_RUNNING.discard(self.process)
        if self._reader is not None:
            self._reader.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return code

    def restart(self) -> NodeProcess:
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- monitor ---------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        reply = request_monitor(self.monitor_dsn, "STATS", timeout=10.0, curve=self.curve)
        answer: dict[str, Any] = json.loads(reply)
        return answer
