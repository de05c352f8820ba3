"""``pzq --shards N``: a supervisor running N shards, each a node in a child process.

It starts every shard (pzq.node.shard_layout says where each keeps its store and
binds), starts one that exits again after a delay that doubles from 0.5 s to 10 s
(and starts from 0.5 s again once the shard had run a while), and on SIGINT or
SIGTERM forwards the signal to every shard, waits for them to stop, SIGKILLs what
is left at a deadline, and exits 0; SIGHUP it forwards to every shard running (each
reads its --authorization file again). A shard that exits with a configuration or
store error (exit 2 or 3) before it was ever ready can never start as it is: the
supervisor stops the others as on SIGTERM and exits with that code, repeating the
shard's error line. It logs one event per line.
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
from pzq.authorization import load_rules
from pzq.errors import ExitCode, PzqError
from pzq.node.config import Config
from pzq.node.keys import node_curve
from pzq.node.shard_layout import Shard, plan_shards
from pzq.node.shard_process import start_shard
from pzq.node.start_report import read_report
from pzq.node.waker import Waker
from pzq.store.directory import refuse_other_content_for_shards, unused_shard_stores

FIRST_DELAY_S = 0.5
LONGEST_DELAY_S = 10.0
SETTLED_S = 30.0  # a shard that ran this long is started again after the first delay
STOP_DEADLINE_S = 30.0  # a node hands back in seconds; past this it is SIGKILLed
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A shard that exits so before it was ever ready cannot start: starting it again is
# the same refusal again.
START_FAILURES = (ExitCode.USAGE, ExitCode.STORE)

log = logs.get_logger("shards")


class ShardCannotStart(PzqError):
    """A shard exited with a configuration or store error before it was ever ready."""

    def __init__(self, number: int, code: int, reason: str | None) -> None:
        said = reason or "its error is in the log above"
        super().__init__(f"shard {number} cannot start (exit {code}; not started again, "
                         f"the other shards are stopped): {said}")
        self.exit_code = ExitCode(code)


@dataclass
class Child:
    """One shard's process (None while it waits to be started again)."""

    shard: Shard
    arguments: list[str]
    process: subprocess.Popen[bytes] | None = None
    report_fd: int | None = None  # the pipe its start is reported on (start_report)
    ever_ready: bool = False
    started_at: float = 0.0
    delay_s: float = FIRST_DELAY_S
    start_at: float | None = None  # when to start it again

    def cannot_start(self, code: int) -> bool:
        """Whether exiting with ``code`` now says that this shard can never start."""
        return not self.ever_ready and code in START_FAILURES

    def take_report(self) -> str | None:
        """Read what the exited shard reported; returns its error line, if it gave one."""
        if self.report_fd is None:
            return None
        reported = read_report(self.report_fd)
        self.report_fd = None
        self.ever_ready = self.ever_ready or reported.ready
        return reported.reason

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
    node_curve(shards[0].config, "the shards")  # each shard's keys, read as it will
    if config.authorization is not None:
        load_rules(config.authorization)  # every shard's rules: a mistake stops them all
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
        self.reloads_asked = 0  # SIGHUPs not forwarded yet
        self.cannot_start: ShardCannotStart | None = None

    def run(self) -> int:
        """Exit code 0 once stopped on request; ShardCannotStart for a shard that can
        never start."""
        previous = self._install_signal_handlers()
        try:
            for child in self.children:
                self._start(child)
            while not self.stop_signals and self.cannot_start is None:
                self._wait(self._until_next_start())
                self._forward_reloads()
                self._reap(restart=True)
                self._start_due()
        finally:
            self._stop_all()
            signal.set_wakeup_fd(-1)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.waker.close()
        log.info("shards_stopped")
        if self.cannot_start is not None:
            raise self.cannot_start
        return ExitCode.OK

    def _install_signal_handlers(self) -> dict[int, Any]:
        def on_stop(signum: int, frame: object) -> None:
            self.stop_signals.append(signum)

        def on_child(signum: int, frame: object) -> None:
            pass  # installed for its wake-up byte: a shard exited

        def on_reload(signum: int, frame: object) -> None:
            self.reloads_asked += 1

        previous: dict[int, Any] = {signum: signal.signal(signum, on_stop)
                                    for signum in STOP_SIGNALS}
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, on_child)
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_reload)
        # Every signal writes a byte the wait below sees, also one that comes just before.
        signal.set_wakeup_fd(self.waker.write_fd, warn_on_full_buffer=False)
        return previous

    def _wait(self, timeout: float | None) -> None:
        select.select([self.waker], [], [], None if timeout is None else max(timeout, 0.0))
        self.waker.drain()

    def _forward_reloads(self) -> None:
        """SIGHUP to every shard running (one starting holds it until it can act)."""
        if self.reloads_asked:
            self.reloads_asked = 0
            for process in self._running():
                process.send_signal(signal.SIGHUP)
            log.info("shards_reload_forwarded", shards=len(self._running()))

    def _start(self, child: Child) -> None:
        child.start_at = None
        child.started_at = time.monotonic()
        try:
            child.process, child.report_fd = start_shard(child.arguments, child.shard.number)
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
            if child.start_at is not None and child.start_at <= now and not self.stop_signals \
                    and self.cannot_start is None:
                self._start(child)

    def _reap(self, restart: bool) -> None:
        for child in self.children:
            if child.process is None or child.process.poll() is None:
                continue
            code, child.process = child.process.returncode, None
            reason = child.take_report()
            if not restart:
                log.info("shard_stopped", shard=child.shard.number, code=code)
            elif child.cannot_start(code):
                log.error("shard_cannot_start", shard=child.shard.number, code=code,
                          error=reason)
                self.cannot_start = self.cannot_start or ShardCannotStart(
                    child.shard.number, code, reason)
            else:
                log.warning("shard_exited", shard=child.shard.number, code=code,
                            restarting_in_ms=self._schedule(child))

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
                child.take_report()  # closes its pipe
