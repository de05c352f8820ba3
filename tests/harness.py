"""Test helpers: the daemon launcher, polling with a deadline, one-shot runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from pzq.launcher import NodeProcess as LauncherNode
from pzq.launcher import wait_until

__all__ = ["NodeProcess", "wait_until", "run_pzq"]


class NodeProcess(LauncherNode):
    """A daemon logging at debug level, so a failing test shows the whole story."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("log_level", "debug")
        super().__init__(*args, **kwargs)


def run_pzq(args: Sequence[str], timeout: float = 30.0,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run the daemon to completion (for start-up errors); returns the finished process."""
    return subprocess.run([sys.executable, "-m", "pzq", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **kwargs.pop("env", {})}, **kwargs)
