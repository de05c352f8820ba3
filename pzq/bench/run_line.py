"""The line a benchmark prints before its table: when it ran, on which code and on what
machine, so a table copied into docs/performance.rst carries where its figures come
from (the page gives each run's date, commit and machine)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pzq

CHECKOUT = Path(pzq.__file__).resolve().parents[1]  # the clone, when pzq runs from one


def run_line(started: datetime, checkout: Path = CHECKOUT) -> str:
    """``run: 2026-11-29 02:14 UTC, commit 6ff0981, 2 cores (CPU model), load 1.20,
    Linux 6.1, Python 3.11.2``; ``started`` is an aware datetime."""
    when = started.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cores = os.cpu_count() or 0
    return (f"run: {when}, {code_of(checkout)}, {cores} cores ({cpu_model()}), "
            f"load {os.getloadavg()[0]:.2f}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def code_of(checkout: Path) -> str:
    """The commit of the clone pzq runs from, said to have changes when it has; else
    the installed release."""
    def git(*arguments: str) -> str | None:
        try:
            ran = subprocess.run(["git", "-C", str(checkout), *arguments], capture_output=True,
                                 text=True, timeout=10, check=False)
        except OSError:  # no git on the machine
            return None
        return ran.stdout.strip() if ran.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD") if (checkout / ".git").exists() else None
    if commit is None:
        return f"pzq {pzq.__version__} (not a git checkout)"
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"commit {commit}" + (" with uncommitted changes" if changed else "")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "CPU model unknown"
