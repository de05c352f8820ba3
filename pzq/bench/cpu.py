"""A process's CPU time, as the benchmarks divide it by their messages."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far, in seconds.

    ``/proc/PID/stat`` counts it in clock ticks of 10 ms, too coarse for a short run of
    a fast node (500 messages may take less than one tick); each thread's ``schedstat``
    counts nanoseconds but forgets threads that have ended. Both fall short of the
    truth, so the larger is the nearer.
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return max(ticks, _threads_seconds(pid))


def _threads_seconds(pid: int) -> float:
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total_ns += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended as we read
            continue
    return total_ns / 1e9
