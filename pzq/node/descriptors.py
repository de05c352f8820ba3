"""The node's file descriptors against its limit, told in the log.

A node out of descriptors cannot accept a connection: ZeroMQ's accept fails and it
tells nobody (no line, no error to a client, whose connection just never completes),
while the connections already open go on. So a thread of the node's own counts its
open descriptors every few seconds and warns, ``descriptors_running_out`` with the
count and the limit, once a minute while they are at 90 % of the limit or more, and
says ``descriptors_enough`` once they are below 80 % again. Only where the system
lists a process's descriptors (Linux's /proc/self/fd).
"""

from __future__ import annotations

import errno
import os
import resource
import threading
import time
from pathlib import Path

from pzq.logs import get_logger

log = get_logger("pzq.node")

OPEN_DESCRIPTORS = Path("/proc/self/fd")
CHECK_EVERY_S = 5.0  # a count lists every descriptor: not at every wake
WARN_AT, CALM_AT = 0.9, 0.8  # shares of the limit
REPEAT_S = 60.0  # a warning said again while it lasts


def open_descriptors(limit: int, listed: Path = OPEN_DESCRIPTORS) -> int:
    """How many are open; ``limit`` when none is left to list them with."""
    try:
        return len(os.listdir(listed))
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return limit
        raise


def descriptor_limit() -> int | None:
    """The soft limit on open descriptors; None where there is none."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


class DescriptorWatch:
    """Counts the process's descriptors from a thread of its own (``start``/``stop``)."""

    def __init__(self, every_s: float = CHECK_EVERY_S,
                 listed: Path = OPEN_DESCRIPTORS) -> None:
        self.every_s = every_s
        self.listed = listed
        self.short = False  # warned, and not yet below CALM_AT since
        self._warned_at = -REPEAT_S
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pzq-descriptors", daemon=True)

    def start(self) -> None:
        if self.listed.is_dir() and descriptor_limit() is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            limit = descriptor_limit()
            if limit is None:
                continue
            try:
                used = open_descriptors(limit, self.listed)
            except OSError as exc:  # the list gone (a sandbox): said once, not counted
                log.warning("descriptors_uncounted", error=str(exc))
                return
            self.check(used, limit, time.monotonic())

    def check(self, used: int, limit: int, now: float) -> None:
        if used >= WARN_AT * limit:
            if not self.short or now - self._warned_at >= REPEAT_S:
                log.warning("descriptors_running_out", open=used, limit=limit,
                            reason="new connections are not accepted once none is left: "
                                   "raise the limit (LimitNOFILE, --ulimit nofile)")
                self._warned_at = now
            self.short = True
        elif self.short and used < CALM_AT * limit:
            log.info("descriptors_enough", open=used, limit=limit)
            self.short = False
