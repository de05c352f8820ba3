"""Backups as a part of the node's loop (pzq.parts), asked for on the monitor socket.

    BACKUP DIR    begin a backup into DIR (an absolute path on the node's host, new or
                  empty); answered at once with the backup's id and state
    BACKUP        the state of the running backup, or of the last one

One backup at a time. While one runs, each wake does one step of it after
everything else (``answer``): a slice of the store's snapshot handed to the backup's
writer thread (pzq.backup.job); the loop does not wait in its poll while there is a
slice to read and room for it, and looks at least every POLL_MS for the writer's
end. So producers and consumers go on, and no wake takes longer than its work plus
one step (measured: STATS ``backup`` ``longest_step_ms`` and ``most_step_cpu_ms``,
the beginning included).
A backup the node stops during is given up and removed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pzq.agenda import Agenda
from pzq.archive.tier.archive import Archive
from pzq.backup.job import RUNNING, Backup, NodeFacts
from pzq.clock import Now
from pzq.errors import PzqError
from pzq.hooks import nothing
from pzq.logs import get_logger
from pzq.parts import Figures, Part, Verb
from pzq.store.store import Store
from pzq.zmqio import Events

log = get_logger("pzq.backup")

POLL_MS = 50
USAGE = "BACKUP DIR (a new or empty directory, its absolute path), or BACKUP for the state"


class Backups(Part):
    def __init__(self, store: Store, archive: Archive | None, facts: NodeFacts,
                 clock: Callable[[], Now]) -> None:
        self._wait_changed: Callable[[], None] = nothing  # until joined
        self._steps: Callable[[], None] = nothing
        self._rest: Callable[[], None] = nothing
        self.store = store
        self.archive = archive
        self.facts = facts
        self.clock = clock  # read at a close, which no wake passes time to
        self.current: Backup | None = None  # the running backup, or the last one

    tells_wait = True  # told when a backup begins and after each of its steps (pzq.agenda)

    def join(self, agenda: Agenda) -> None:
        self._wait_changed = partial(agenda.changed, self)
        self._steps = partial(agenda.ask, self, "answer")  # while a backup runs
        self._rest = partial(agenda.rest, self, "answer")
        self._rest()

    def verbs(self) -> dict[bytes, Verb]:
        return {b"BACKUP": self._verb}

    @property
    def running(self) -> bool:
        return self.current is not None and self.current.state == RUNNING

    def _verb(self, arguments: list[bytes], now: Now) -> bytes:
        if not arguments:
            return _text(self._status(now))
        if len(arguments) != 1:
            return f"ERROR: usage: {USAGE}".encode()
        try:
            self._begin(arguments[0].decode(errors="replace"), now)
        except (ValueError, PzqError) as exc:
            return f"ERROR: {exc}".encode()
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            return f"ERROR: cannot begin the backup: {exc.strerror or exc}{where}".encode()
        return _text(self._status(now))

    def _begin(self, given: str, now: Now) -> None:
        directory = Path(given)
        if not directory.is_absolute():
            raise ValueError(f"{given} is not an absolute path (the node's working directory "
                             "is not the asker's): " + USAGE)
        self._refuse_own_directories(directory)
        if self.running:
            assert self.current is not None
            raise ValueError(f"backup {self.current.id} into {self.current.directory} is "
                             "running: one at a time")
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise ValueError(f"{directory} exists and is not an empty directory: give a new "
                             "or empty one")
        backup_id = f"{self.facts.node_id}-{now.wall_us}"
        began = _clocks()  # fsync the archive, open its files, take the snapshot
        self.current = Backup(backup_id, directory, self.store, self.archive, self.facts, now)
        self.current.stepped("begin", *_since(began))
        self._wait_changed()
        self._steps()
        log.info("backup_started", backup=backup_id, directory=str(directory),
                 store_messages=self.store.messages,
                 archive_bytes=self.current.archive_total_bytes)

    def _refuse_own_directories(self, directory: Path) -> None:
        """A copy inside the store or the archive it copies is on their disk, goes with
        them when they are lost or removed, and is read there as what it is not (a
        subfolder of the archive is a topic's)."""
        target = directory.resolve()
        owned = [("--database", self.store.path)]
        if self.archive is not None:
            owned.append(("--archive-dir", self.archive.directory))
        for option, path in owned:
            own = Path(path).resolve()
            if target == own or own in target.parents:
                raise ValueError(f"{directory} is inside the node's {option} {own}: give a "
                                 "directory outside the store and the archive it copies")

    def _status(self, now: Now) -> dict[str, object]:
        return {"state": "none"} if self.current is None else self.current.status(now)

    def timeout_ms(self, now: Now) -> int | None:
        if self.current is None or not self.running:
            return None
        return 0 if self.current.wants_step() else POLL_MS

    def answer(self, events: Events, now: Now) -> None:
        if self.current is None or self.current.state != RUNNING:  # (``running``, inline)
            self._rest()  # asked again when the next backup begins
            return
        began = _clocks()  # the step's own length: the pause it adds to a wake
        self.current.step(now)
        self.current.stepped("slice", *_since(began))
        self._wait_changed()
        if self.current.state != RUNNING:
            self._rest()

    def figures(self, now: Now) -> Figures:
        return {"backup": self._status(now)}

    def close(self) -> None:
        if self.current is not None:
            self.current.cancel("the node stopped during the backup", self.clock())


def _clocks() -> tuple[float, float]:
    """Wall and this thread's CPU time: a step's wall time also counts the waits for
    the CPU and the GIL, its CPU time only its own work."""
    return time.perf_counter(), time.thread_time()


def _since(began: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clocks()
    return wall - began[0], cpu - began[1]


def _text(status: dict[str, object]) -> bytes:
    return "".join(f"{key}: {value}\n" for key, value in status.items()).encode()
