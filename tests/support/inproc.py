"""A real node inside the test process, for flow tests that need no subprocess.

The node is the daemon's own: its options parsed as the command line's are
(pzq.node.main), a LevelDB store in a folder of the test's, the loop of
pzq.node.run in a thread. Every endpoint is ``inproc://``, on the test's ZeroMQ
context, so clients reach it without a port or a socket file. It stops as a
SIGTERM stops the daemon: the stop request set, the loop woken through its waker,
then the ordered hand-back and close of pzq.node.run.

What needs a process or a network stays with NodeProcess (tests.support.harness): a
crash (SIGKILL), start-up errors and exit codes, signals, CURVE, clusters, and
connection events (an inproc connection sends none, so ``consumers_connected`` stays
0 and a consumer's disconnection is not seen).
"""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from pzq.clock import Now
from pzq.node.main import open_store, parse_config
from pzq.node.run import StopRequest, run
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.protocol.monitor_text import parse_monitor_text
from pzq.security import NO_CURVE
from pzq.zmqio import Context
from tests.support.harness import wait_until

__all__ = ["InprocNode"]

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
SIGTERM = bytes([signal.SIGTERM])  # what the daemon's signal handler writes to the waker
_names = itertools.count()


class InprocNode:
    """One node in a thread of this process; ``options`` as the ``pzq`` command takes
    them (the endpoints and the database are the node's own)."""

    def __init__(self, context: Context, database: Path, *options: str,
                 consume: bool = True) -> None:
        self.context = context
        self.database = database
        self.options = list(options)
        self.consume = consume
        self.dsns: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._stop: StopRequest | None = None
        self._waker: Waker | None = None
        self._failure: BaseException | None = None

    # -- endpoints -----------------------------------------------------------------

    @property
    def receive_dsn(self) -> str:
        return self.dsns["receive"]

    @property
    def send_dsn(self) -> str:
        return self.dsns["send"]

    @property
    def monitor_dsn(self) -> str:
        return self.dsns["monitor"]

    @property
    def consume_dsn(self) -> str:
        return self.dsns["consume"]

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> InprocNode:
        """Start the node; returns once its monitor answers. Each start has endpoint
        names of its own (an inproc name is freed only once its socket is reaped), so
        clients connect after a restart, as they would to a new address."""
        assert not self.running, "the node is running already"
        name = f"inproc://pzq-{next(_names)}"
        parts = ["receive", "send", "monitor", *(["consume"] if self.consume else [])]
        self.dsns = {part: f"{name}-{part}" for part in parts}
        config = parse_config(["--database", str(self.database),
                               *(arg for part in parts
                                 for arg in (f"--{part}-dsn", self.dsns[part])),
                               *self.options])
        store = open_store(config)
        try:
            state = NodeState(config, store, Now.read())
        except BaseException:
            store.close()
            raise
        self._stop, self._waker, self._failure = StopRequest(), Waker(), None
        self._thread = threading.Thread(target=self._serve, args=(state, self._waker,
                                                                 self._stop),
                                        name=f"pzq node {name}", daemon=True)
        self._thread.start()
        try:
            self.ask("PING", START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _serve(self, state: NodeState, waker: Waker, stop: StopRequest) -> None:
        try:
            run(state, waker, stop, NO_CURVE, shared=self.context)
        except BaseException as exc:  # handed to the test by stop() and ask()
            self._failure = exc
        finally:
            state.store.close()
            waker.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop as SIGTERM stops the daemon; raises what the node's loop raised."""
        if self._thread is None:
            return
        if self._stop is not None and self._waker is not None and self._thread.is_alive():
            self._stop.requested = True
            self._waker.wake(SIGTERM)
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise TimeoutError(f"the node did not stop within {STOP_TIMEOUT_S} s")
        self._thread = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise RuntimeError("the node's loop failed") from failure

    def restart(self) -> InprocNode:
        self.stop()
        return self.start()

    # -- monitor -------------------------------------------------------------------

    def ask(self, command: str, timeout: float = 10.0) -> str:
        """One monitor request, answered as text; fails at once if the node's loop
        ended instead of answering."""
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        try:
            socket.connect(self.monitor_dsn)
            socket.send_multipart([b"", command.encode()])
            deadline = time.monotonic() + timeout
            while not socket.poll(50, zmq.POLLIN):
                if not self.running:
                    raise RuntimeError(f"the node ended before answering {command}") \
                        from self._failure
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer to {command} within {timeout:g} s")
            answer: bytes = socket.recv_multipart()[-1]
            return answer.decode()
        finally:
            socket.close()

    def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.ask("STATS"))
        return answer

    def figures(self) -> dict[str, int | str]:
        """MONITOR's ``key: value`` lines, numbers as ints."""
        raw = parse_monitor_text(self.ask("MONITOR").encode())
        return {key: int(value) if value.lstrip("-").isdigit() else value
                for key, value in raw.items()}

    def wait_stats(self, condition: Callable[[dict[str, Any]], bool], timeout: float = 10.0,
                   message: str = "STATS figures") -> dict[str, Any]:
        def met() -> dict[str, Any] | None:
            stats = self.stats()
            return stats if condition(stats) else None

        found = wait_until(met, timeout, message=message)
        assert found is not None  # wait_until returns only what is true
        return found
