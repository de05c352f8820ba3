"""How many tests run in process: a pytest plugin that counts, per test file, the
tests that start a process (a daemon, a tool, a script, a JVM) and those that start
none, and sums every test's durations (setup, call and teardown).

``scripts/run-tests -p tests.support.census`` prints the table after the run. A test
starts a process when one is started while it runs (its setup, call or teardown) or by
a fixture it uses, whenever that fixture was set up (a module's daemon counts for
every test of the module). Processes are seen where they are made: ``subprocess``
and ``multiprocessing`` start theirs through ``_posixsubprocess.fork_exec`` (or
``os.posix_spawn``), and a bare ``os.fork`` is seen by its hook.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CensusCount"]

_started: list[str] = []  # a short name of every process this test process started
_FIXTURE_MARK = "_census_started_process"
_PROPERTY = "census"


def _name(argv: Any) -> str:
    """The command's program and, for Python, its module or script."""
    words = [word.decode(errors="replace") if isinstance(word, bytes) else str(word)
             for word in (argv or [])]
    if not words:
        return "?"
    program = Path(words[0]).name
    if program.startswith("python"):
        rest = [word for word in words[1:] if word not in ("-P", "-u", "-I", "-B")]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return rest[1]
        if rest and not rest[0].startswith("-"):
            return Path(rest[0]).name
    return program


_fork_exec = _posixsubprocess.fork_exec


def _counted_fork_exec(*args: Any, **kwargs: Any) -> Any:
    _started.append(_name(args[0] if args else None))
    return _fork_exec(*args, **kwargs)


_posix_spawn = os.posix_spawn


def _counted_posix_spawn(path: Any, argv: Any, *args: Any, **kwargs: Any) -> Any:
    _started.append(_name(argv))
    return _posix_spawn(path, argv, *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    # subprocess holds its own reference to fork_exec, multiprocessing looks it up
    _posixsubprocess.fork_exec = _counted_fork_exec  # type: ignore[attr-defined]
    subprocess._fork_exec = _counted_fork_exec  # type: ignore[attr-defined]
    os.posix_spawn = _counted_posix_spawn
    os.register_at_fork(before=lambda: _started.append("fork"))
    config.pluginmanager.register(CensusCount(), "census-count")


def pytest_unconfigure(config: pytest.Config) -> None:
    _posixsubprocess.fork_exec = _fork_exec  # type: ignore[attr-defined]
    subprocess._fork_exec = _fork_exec  # type: ignore[attr-defined]
    os.posix_spawn = _posix_spawn


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any],
                         request: pytest.FixtureRequest) -> Generator[None, None, None]:
    before = len(_started)
    yield
    if len(_started) > before:
        setattr(fixturedef, _FIXTURE_MARK, True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, None, None]:
    item.stash[_first] = len(_started)
    yield


_first = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    if call.when != "teardown":
        return
    started = _started[item.stash.get(_first, len(_started)):]
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info is not None else ()):
        if defs and getattr(defs[-1], _FIXTURE_MARK, False):
            started.append(f"fixture {name}")
    outcome.get_result().user_properties.append((_PROPERTY, sorted(set(started))))


class CensusCount:
    """Gathers the reports (on the controller too, when xdist runs the tests) and prints
    the table at the end."""

    def __init__(self) -> None:
        self.durations: dict[str, float] = defaultdict(float)
        self.skipped: set[str] = set()
        self.processes: dict[str, list[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.durations[report.nodeid] += report.duration
        if report.skipped:
            self.skipped.add(report.nodeid)
        for key, value in report.user_properties:
            if key == _PROPERTY:
                self.processes[report.nodeid] = list(value)

    def rows(self) -> dict[str, tuple[int, int]]:
        """Per file: tests that ran in process, tests that started a process."""
        files: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for nodeid, started in self.processes.items():
            if nodeid in self.skipped:
                continue
            files[nodeid.split("::")[0]][1 if started else 0] += 1
        return {name: (counts[0], counts[1]) for name, counts in sorted(files.items())}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        rows = self.rows()
        if not rows:
            return
        write = terminalreporter.write_line
        terminalreporter.section("tests in process")
        write(f"{'file':60} {'in process':>10} {'process':>8}")
        for name, (inside, outside) in rows.items():
            write(f"{name:60} {inside:>10} {outside:>8}")
        inside = sum(row[0] for row in rows.values())
        outside = sum(row[1] for row in rows.values())
        share = 100 * inside / max(1, inside + outside)
        write(f"{'all (skipped left out: ' + str(len(self.skipped)) + ')':60} "
              f"{inside:>10} {outside:>8}")
        write(f"in process: {inside} of {inside + outside} tests ({share:.1f} %)")
        write(f"sum of the tests' durations: {sum(self.durations.values()):.1f} s")
        kinds: dict[str, int] = defaultdict(int)
        for started in self.processes.values():
            for kind in started:
                kinds[kind] += 1
        write("tests per process started: " + ", ".join(
            f"{kind} {count}" for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1])))
        report = os.environ.get("PZQ_CENSUS_REPORT")
        if report:
            Path(report).write_text("".join(
                f"{nodeid}\t{self.durations[nodeid]:.3f}\t{' '.join(started) or '-'}\n"
                for nodeid, started in sorted(self.processes.items())
                if nodeid not in self.skipped))
