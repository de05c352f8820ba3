"""How a shard of ``pzq --shards N`` tells its supervisor whether it started: one line
on a pipe the supervisor hands down (its descriptor in REPORT_FD), ``ready`` once the
node serves, or the one-line error it stops with at its start. The supervisor reads it
when the shard exits, so it knows a shard that can never start (a configuration its
store refuses, say) from one that ran and died, and stops instead of starting it
again for ever. A node without a supervisor reports nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

REPORT_FD = "PZQ_START_REPORT_FD"
READY = "ready"


class StartReport:
    """Reports nothing: a node on its own."""

    def ready(self) -> None:
        """The node serves: its endpoints are bound and its loop is about to run."""

    def failed(self, reason: str) -> None:
        """The node stops at its start; ``reason`` is its one-line error."""


NO_REPORT = StartReport()


class PipeReport(StartReport):
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def ready(self) -> None:
        self._write(READY)

    def failed(self, reason: str) -> None:
        self._write(" ".join(reason.split()))

    def _write(self, line: str) -> None:
        try:
            os.write(self.fd, f"{line}\n".encode())
        except OSError:
            pass  # the supervisor is gone: nobody to tell


def start_report() -> StartReport:
    """The report this process was handed (pzq.node.shard_process), else none."""
    text = os.environ.pop(REPORT_FD, "")
    return PipeReport(int(text)) if text.isdigit() else StartReport()


@dataclass(frozen=True)
class Reported:
    """What a shard reported before it exited."""

    ready: bool
    reason: str | None  # its one-line error, when it stopped at its start


def read_report(fd: int) -> Reported:
    """What the shard whose pipe ``fd`` reads wrote, read once it exited; closes ``fd``."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass  # a write end still open elsewhere: what is there is all it wrote
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").splitlines()
    reasons = [line for line in lines if line != READY]
    return Reported(READY in lines, reasons[-1] if reasons else None)
