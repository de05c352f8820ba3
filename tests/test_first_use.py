"""What a new user meets first: the daemon and the tools given wrong or unlucky input
say so in one line with a documented exit code, and never wait in silence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from harness import run_pzq

pytestmark = pytest.mark.timeout(60)
BIN = Path(sys.executable).parent
LOOPBACK = ("--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
            "--monitor-dsn", "tcp://127.0.0.1:*")


def tool(name: str, *args: str, timeout: float = 40, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / name), *args], capture_output=True, check=False,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- 1. one node per archive directory --------------------------------------------------

def test_a_second_node_on_one_archive_directory_is_refused_until_the_first_is_gone(
        start_node, tmp_path):
    archive = tmp_path / "archive"
    first = start_node("--archive-dir", str(archive))
    second = run_pzq(["--database", str(tmp_path / "other"), "--archive-dir", str(archive),
                      *LOOPBACK])
    assert second.returncode == 3
    assert one_line(second.stderr) == (f"pzq: error: archive directory {archive} is in use "
                                       "by another node (its lock .lock is held)")
    first.kill()  # a crash: the kernel drops the lock with the process
    start_node("--archive-dir", str(archive), database=tmp_path / "other")


# -- 2. ports out of range ----------------------------------------------------------------

@pytest.mark.parametrize("flag, port", [("--receive-dsn", "99999"), ("--send-dsn", "-1"),
                                        ("--monitor-dsn", "65536"), ("--consume-dsn", ""),
                                        ("--broadcast-dsn", "87067")])
def test_a_port_out_of_range_is_refused_not_wrapped(tmp_path, flag, port):
    dsn = f"tcp://127.0.0.1:{port}"
    # Before the check, such a node started: the short timeout ends it.
    result = run_pzq(["--database", str(tmp_path / "db"), *LOOPBACK, flag, dsn], timeout=10)
    assert result.returncode == 2
    assert one_line(result.stderr) == (f"pzq: error: {flag} '{dsn}' needs a port from 1 to "
                                       "65535, or * for any free port, e.g. tcp://*:11131")
    assert not (tmp_path / "db").exists()  # refused before anything was made
