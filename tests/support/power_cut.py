"""Power cuts for tests: a PowerFS (tests/support/powerfs.py) mounted in its own process,
cut (unmounted, keeping only what was fsync'd) and started again from the image."""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

POWERFS = Path(__file__).with_name("powerfs.py")
MOUNT_TIMEOUT_S = 15.0


def processes_naming(directory: Path) -> dict[int, str]:
    """Every process whose command line names a path under ``directory``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        if str(directory) in command:
            found[int(entry.name)] = command
    return found


def kill_processes_naming(directory: Path) -> None:
    """SIGKILL every process naming ``directory`` and reap those that are children: a
    node whose start a signal cut short (inside its Popen, which never returned, so
    nothing holds it to stop)."""
    for pid in processes_naming(directory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def unavailable() -> str | None:
    """Why FUSE cannot be used here (None: it can)."""
    if importlib.util.find_spec("mfusepy") is None:
        # the environment the script or suite runs in, not whatever "pip" a shell finds
        return (f"no mfusepy in the Python environment {sys.prefix} (scripts/ensure-env "
                f"test installs it into the project's .venv with the test suite's other "
                f"needs, or {sys.prefix}/bin/pip install mfusepy alone)")
    if ctypes.util.find_library("fuse3") is None:
        return "no libfuse3 (Debian: apt-get install fuse3)"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian: apt-get install fuse3)"
    return None


class PowerCut:
    """A PowerFS mounted at ``mountpoint``; ``cut()`` is a power cut (whatever uses the
    mount must be dead by then), ``start()`` boots from what the cut left."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.mountpoint = directory / "mnt"
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.disks = 0
        self.live = self._disk()
        self.live.mkdir()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "powerfs-0.log"

    def _disk(self) -> Path:
        return self.directory / f"disk-{self.disks}"

    def start(self) -> None:
        self.disks += 1
        image = self._disk()
        self.log = self.directory / f"powerfs-{self.disks}.log"  # a pipe could fill and stall it
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(POWERFS), str(self.live), str(self.mountpoint), str(image)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(self.mountpoint):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(f"PowerFS did not mount: {self._last_error()}")
            time.sleep(0.02)  # polling the mount table with a deadline
        self.live = image

    def _last_error(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no message"

    def cut(self) -> None:
        """The power goes: what was not fsync'd is lost; the next start boots from it."""
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.mountpoint} stays busy")
            time.sleep(0.05)  # a process that used it is still closing its files
        assert self.process is not None
        self.process.wait(MOUNT_TIMEOUT_S)
        if self.process.returncode != 0:
            raise RuntimeError(f"PowerFS failed: {self._last_error()}")
        self.process = None

    def close(self) -> None:
        if self.process is not None:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                           capture_output=True)
            self.process.kill()
            self.process.wait()
            self.process = None
