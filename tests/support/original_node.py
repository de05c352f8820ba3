"""The C++ original pzq (``PZQ_ORIGINAL``, scripts/build-original builds it) as a node
a test can drive as it drives pzq's daemons: figures from its MONITOR, SIGKILL and a
restart on the same database and endpoints, SIGSTOP and SIGCONT."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from pzq.bench.nodes import wait_until
from pzq.bench.original import OriginalNode
from pzq.client import monitor_figures


class OriginalDaemon(OriginalNode):
    def figures(self) -> dict[str, int | str]:
        """MONITOR's ``key: value`` lines (the original's six), numbers as ints."""
        raw = monitor_figures(self.monitor_dsn, timeout=10.0)
        return {key: int(value) if value.lstrip("-").isdigit() else value
                for key, value in raw.items()}

    def wait_figures(self, condition: Callable[[dict[str, Any]], bool], timeout: float = 10.0,
                     message: str = "monitor figures") -> dict[str, Any]:
        return wait_until(lambda: (lambda f: f if condition(f) else None)(self.figures()),
                          timeout, message=message)

    def restart(self) -> OriginalDaemon:
        self.start()
        return self

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
