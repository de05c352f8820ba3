"""The C++ original pzq as a benchmark target, so pzq's figures carry a ratio to it
measured in the same run (``pzq-bench --original PATH``; scripts/build-original
builds it from its public source).

The original binds fixed endpoints and logs nothing when it is ready, so it gets
free loopback ports and counts as ready once its monitor answers.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pzq.bench.ceiling import free_endpoint
from pzq.bench.nodes import STOP_TIMEOUT, wait_until
from pzq.client import request_monitor

START_TIMEOUT = 20.0


class OriginalNode:
    """One original pzq daemon on free loopback ports, its database in ``directory``."""

    def __init__(self, binary: Path, directory: Path, *extra_args: str) -> None:
        self.binary = binary
        self.directory = directory
        self.extra_args = list(extra_args)
        self.receive_dsn, self.send_dsn = free_endpoint(), free_endpoint()
        self.monitor_dsn = f"ipc://{directory}/monitor"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OriginalNode:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(self.binary), "--database", str(self.directory / "sink.kch"),
             "--receive-dsn", self.receive_dsn, "--send-dsn", self.send_dsn,
             "--monitor-dsn", self.monitor_dsn, *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, START_TIMEOUT, interval=0.1,
                   message=f"the original pzq ({self.binary}) to answer on its monitor")
        return self

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.binary} exited with {self.process.returncode}")
        try:
            request_monitor(self.monitor_dsn, "MONITOR", timeout=0.5)
        except TimeoutError:
            return False
        return True

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)


def check_binary(path: Path) -> str | None:
    """Why ``path`` cannot be the original pzq, or None when it runs."""
    if not path.is_file():
        return f"{path} is not a file (scripts/build-original builds one)"
    try:
        result = subprocess.run([str(path), "--help"], capture_output=True, timeout=10,
                                check=False)
    except OSError as exc:
        return f"cannot run {path}: {exc.strerror}"
    if b"--receive-dsn" not in result.stdout + result.stderr:
        return f"{path} does not look like the original pzq (no --receive-dsn in its --help)"
    return None
