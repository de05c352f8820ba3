"""What a benchmark run ran on: when, which code, which machine and which versions of
the software under the figures (the performance page heads every table with it)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pzq.bench.run_line import CHECKOUT, code_of, cpu_model


@dataclass(frozen=True)
class Machine:
    started: datetime  # aware, UTC
    code: str  # "commit abc1234", "... with uncommitted changes", or the release
    cpu: str
    cores: int
    ram_gib: float
    kernel: str
    load: float  # the 1-minute load average as the run began
    software: dict[str, str] = field(default_factory=dict)  # name -> version

    def when(self) -> str:
        return self.started.strftime("%Y-%m-%d %H:%M UTC")

    def code_and_tree(self) -> str:
        """The commit, and whether the clone had changes (the run measured those too)."""
        if self.code.startswith("commit ") and "uncommitted" not in self.code:
            return f"{self.code}, no uncommitted changes"
        return self.code

    def hardware(self) -> str:
        return (f"{self.cores} cores ({self.cpu}), {self.ram_gib:.1f} GiB RAM, {self.kernel}, "
                f"load average {self.load:.2f} as the run began")

    def versions(self, names: Sequence[str]) -> str:
        return ", ".join(f"{name} {self.software[name]}" for name in names
                         if name in self.software)


def this_machine(checkout: Path = CHECKOUT) -> Machine:
    software = {"Python": platform.python_version(), **_zmq(), **_leveldb()}
    return Machine(started=datetime.now(UTC), code=code_of(checkout), cpu=cpu_model(),
                   cores=os.cpu_count() or 0, ram_gib=_ram_gib(),
                   kernel=f"{platform.system()} {platform.release()}",
                   load=os.getloadavg()[0], software=software)


def server_version(binary: Path | None) -> str | None:
    """redis-server's or nats-server's version (``v=7.0.15``, ``v2.10.1``), or None."""
    if binary is None:
        return None
    try:
        ran = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=20, check=False)
    except OSError:
        return None
    found = re.search(r"v=?(\d+\.\d+[.\w-]*)", ran.stdout + ran.stderr)
    return found.group(1) if found else None


def spark_versions() -> dict[str, str]:
    """PySpark's and Java's versions, where they are installed."""
    found: dict[str, str] = {}
    try:
        found["PySpark"] = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return found
    java = shutil.which("java")
    if java is not None:
        ran = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30,
                             check=False)
        version = re.search(r'version "([^"]+)"', ran.stderr)
        if version:
            found["Java"] = version.group(1)
    return found


def _zmq() -> dict[str, str]:
    import zmq

    return {"pyzmq": zmq.__version__, "libzmq": zmq.zmq_version()}


def _leveldb() -> dict[str, str]:
    import plyvel

    found = {"plyvel": str(plyvel.__version__)}
    leveldb = getattr(plyvel, "__leveldb_version__", None)
    if leveldb:
        found["LevelDB"] = str(leveldb)
    return found


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    return 0.0
