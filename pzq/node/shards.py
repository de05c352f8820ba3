"""``pzq --shards N``: a supervisor running N shards, each a node in a child process.

It starts every shard (pzq.node.shard_layout says where each keeps its store and
binds), starts one that exits again after a delay that doubles from 0.5 s to 10 s
(and starts from 0.5 s again once the shard had run a while), and on SIGINT or
SIGTERM forwards the signal to every shard, waits for them to stop, SIGKILLs what
is left at a deadline, and exits 0. It logs one event per line.
"""

from __future__ import annotations

import select
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq import logs
from pzq.errors import ExitCode
from pzq.node.config import Config
from pzq.node.shard_layout import Shard, plan_shards
from pzq.node.shard_process import start_shard
from pzq.node.waker import Waker
from pzq.store.directory import refuse_other_content_for_shards, unused_shard_stores

FIRST_DELAY_S = 0.5
LONGEST_DELAY_S = 10.0
SETTLED_S = 30.0  # a shard that ran this long is started again after the first delay
STOP_DEADLINE_S = 30.0  # a node hands back in seconds; past this it is SIGKILLed
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

log = logs.get_logger("shards")


@dataclass
class Child:
    """One shard's process (None while it waits to be started again)."""

    shard: Shard
    arguments: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    delay_s: float = FIRST_DELAY_S
    start_at: float | None = None  # when to start it again

    def schedule_start(self, now: float) -> float:
        """Set when this shard starts again after exiting at ``now``; returns the delay."""
        if now - self.started_at >= SETTLED_S:
            self.delay_s = FIRST_DELAY_S
        delay_s, self.delay_s = self.delay_s, min(self.delay_s * 2, LONGEST_DELAY_S)
        self.start_at = now + delay_s
        return delay_s


def run_shards(config: Config, arguments: Sequence[str]) -> int:
    """Supervise the shards of ``config``; ``arguments`` are the supervisor's own, which
    each shard's command line repeats before its own values (so those win)."""
    shards = plan_shards(config)
    refuse_other_content_for_shards(Path(config.database))
    for path in unused_shard_stores(Path(config.database), config.shards):
        log.warning("shard_store_unused", path=str(path),
                    reason=f"--shards {config.shards} starts no node on it")
    return Supervisor([Child(shard, [*arguments, *shard.arguments()]) for shard in shards]).run()


class Supervisor:
    def __init__(self, children: list[Child]) -> None:
        self.children = children
        self.waker = Waker()
        self.stop_signals: list[int] = []

    def run(self) -> int:
        previous = self._install_signal_handlers()
        try:
            for child in self.children:
                self._start(child)
            while not self.stop_signals:
                self._wait(self._until_next_start())
                self._reap(restart=True)
                self._start_due()
        finally:
            self._stop_all()
            signal.set_wakeup_fd(-1)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.waker.close()
        log.info("shards_stopped")
        return ExitCode.OK

    def _install_signal_handlers(self) -> dict[int, Any]:
        def on_stop(signum: int, frame: object) -> None:
            self.stop_signals.append(signum)

        def on_child(signum: int, frame: object) -> None:
            pass  # installed for its wake-up byte: a shard exited

        previous: dict[int, Any] = {signum: signal.signal(signum, on_stop)
                                    for signum in STOP_SIGNALS}
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, on_child)
        # Every signal writes a byte the wait below sees, also one that comes just before.
        signal.set_wakeup_fd(self.waker.write_fd, warn_on_full_buffer=False)
        return previous

    def _wait(self, timeout: float | None) -> None:
        select.select([self.waker], [], [], None if timeout is None else max(timeout, 0.0))
        self.waker.drain()

    def _start(self, child: Child) -> None:
        child.start_at = None
        child.started_at = time.monotonic()
        try:
            child.process = start_shard(child.arguments)
        except OSError as exc:  # no memory or processes left to fork: try again later
            log.error("shard_start_failed", shard=child.shard.number, error=str(exc),
                      restarting_in_ms=self._schedule(child))
            return
        log.info("shard_started", shard=child.shard.number, pid=child.process.pid)

    def _schedule(self, child: Child) -> int:
        """Set when ``child`` starts again; returns the delay in milliseconds."""
        return round(child.schedule_start(time.monotonic()) * 1000)

    def _until_next_start(self) -> float | None:
        due = [child.start_at for child in self.children if child.start_at is not None]
        return min(due) - time.monotonic() if due else None

    def _start_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.start_at is not None and child.start_at <= now and not self.stop_signals:
                self._start(child)

    def _reap(self, restart: bool) -> None:
        for child in self.children:
            if child.process is None or child.process.poll() is None:
                continue
            code, child.process = child.process.returncode, None
            if restart:
                log.warning("shard_exited", shard=child.shard.number, code=code,
                            restarting_in_ms=self._schedule(child))
            else:
                log.info("shard_stopped", shard=child.shard.number, code=code)

    def _running(self) -> list[subprocess.Popen[bytes]]:
        return [child.process for child in self.children if child.process is not None]

    def _stop_all(self) -> None:
        """Forward each stop signal (a second one makes the nodes exit at once, as it
        makes one node), wait for the shards to exit, SIGKILL them at the deadline."""
        if not self.stop_signals:  # an unexpected error: stop the shards as SIGTERM does
            self.stop_signals.append(signal.SIGTERM)
        log.info("shards_stopping", signal=signal.Signals(self.stop_signals[0]).name)
        forwarded = 0
        deadline = time.monotonic() + STOP_DEADLINE_S
        for child in self.children:
            child.start_at = None
        while True:
            for signum in self.stop_signals[forwarded:]:
                for process in self._running():
                    process.send_signal(signum)
                forwarded += 1
            self._reap(restart=False)
            if not self._running() or time.monotonic() >= deadline:
                break
            self._wait(deadline - time.monotonic())
        for child in self.children:
            if child.process is not None:
                log.warning("shard_killed", shard=child.shard.number, pid=child.process.pid,
                            reason=f"not stopped after {STOP_DEADLINE_S:g} s")
                child.process.kill()
                child.process.wait()
                child.process = None
