"""A real node inside the test process, for flow tests that need no subprocess.

The node is the daemon's own: its options parsed as the command line's are
(pzq.node.main), a LevelDB store in a folder of the test's, the loop of
pzq.node.run in a thread. Its endpoints are ``inproc://`` on the test's ZeroMQ
context, so clients reach it without a port or a socket file; or, with ``tcp=True``,
loopback ports of its own drawn once and bound again at each restart, on a context
of the node's own, as a daemon's are (for what a test reaches without the test's
context: a tool, an exporter, the monitor's own clients; and for the connection
events an inproc connection does not send). It stops as a SIGTERM stops the daemon:
the stop request set, the loop woken through its waker, then the ordered hand-back
and close of pzq.node.run. Its log (structlog, as JSON lines) is kept as a daemon's
stderr is: ``events``, ``stderr_lines``, printed when a test fails.

What needs a process stays with NodeProcess (tests.support.harness): a crash
(SIGKILL), start-up errors and exit codes, signals, clusters, the tools as a user runs
them, and CURVE (the node here serves none: the tests of it read the refusals the
authenticator's own thread logs, which only a daemon's stderr keeps whole).
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import structlog
import zmq

from pzq.clock import Now
from pzq.node.main import open_store, parse_config
from pzq.node.run import StopRequest, run
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.protocol.monitor_text import parse_monitor_text
from pzq.security import NO_CURVE
from pzq.zmqio import Context
from tests.support.harness import NodeProcess, NodeWaits
from tests.support.ports import port_below_ephemeral

__all__ = ["AnyNode", "InprocNode"]

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
START_ATTEMPTS = 3  # a first start draws other ports when another program took one
SIGTERM = bytes([signal.SIGTERM])  # what the daemon's signal handler writes to the waker
_names = itertools.count()


# -- the nodes' logs ---------------------------------------------------------------

_serving = threading.local()  # .node: the InprocNode whose loop runs on this thread


class _ThreadsLog:
    """structlog's output: a node's thread writes to that node's log, any other thread
    to stderr (as structlog's own default would)."""

    def msg(self, line: str) -> None:
        node: InprocNode | None = getattr(_serving, "node", None)
        if node is None:
            print(line, file=sys.stderr, flush=True)
        else:
            node.log_line(line)

    debug = info = warning = warn = error = critical = exception = failure = fatal = msg


def _log_to_threads() -> None:
    """The daemon's JSON lines (pzq.logs with --log-format json, every level), each to
    the node whose loop wrote it. Set once for this process; structlog looks it up at
    each call (nothing here caches a logger)."""
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer()],
        wrapper_class=structlog.BoundLogger,
        logger_factory=lambda *args: _ThreadsLog(),
        cache_logger_on_first_use=False)


class _Waker(Waker):
    """The daemon's waker, closed once no wake-up can reach it: a test's thread that asks
    a stop may write as the node closes it, and in a process that goes on, the
    descriptor it wrote to may be another file's by then."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._closed = False

    def wake(self, reason: bytes) -> None:
        with self._lock:
            if not self._closed:
                super().wake(reason)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            super().close()


class InprocNode(NodeWaits):
    """One node in a thread of this process; ``options`` as the ``pzq`` command takes
    them (the endpoints and the database are the node's own), kept in ``extra_args``
    as a daemon's are, where a test may change them for the next start."""

    curve = None  # CURVE needs a daemon: clients connect in the clear

    def __init__(self, context: Context, database: Path, *options: str,
                 consume: bool = True, tcp: bool = False) -> None:
        self.context = context
        self.database = database
        self.extra_args = list(options)
        self.consume = consume
        self.tcp = tcp
        self.dsns: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []
        self._thread: threading.Thread | None = None
        self._stop: StopRequest | None = None
        self._waker: _Waker | None = None
        self._failure: BaseException | None = None

    # -- endpoints -----------------------------------------------------------------

    def dsn(self, name: str) -> str:
        return self.dsns[name]

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

    def _parts(self) -> list[str]:
        return ["receive", "send", "monitor", *(["consume"] if self.consume else [])]

    def _draw_endpoints(self) -> None:
        """inproc: names of its own at each start (an inproc name is freed only once its
        socket is reaped), so clients connect after a restart as to a new address. tcp:
        ports drawn at the first start and kept, so clients reconnect after a restart as
        they do to a daemon's."""
        if self.tcp:
            self.dsns = {part: f"tcp://127.0.0.1:{port_below_ephemeral()}"
                         for part in self._parts()}
        else:
            name = f"inproc://pzq-{next(_names)}"
            self.dsns = {part: f"{name}-{part}" for part in self._parts()}
        # an endpoint the test gives in the options is the node's
        given = dict(zip(self.extra_args, self.extra_args[1:], strict=False))
        self.dsns.update({part: given[f"--{part}-dsn"] for part in self._parts()
                          if f"--{part}-dsn" in given})

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> InprocNode:
        """Start the node; returns once its monitor answers."""
        assert not self.running, "the node is running already"
        first = not self.dsns
        for attempt in range(START_ATTEMPTS):
            if first or not self.tcp:
                self._draw_endpoints()
            try:
                return self._start()
            except RuntimeError as exc:
                if not (first and self.tcp) or attempt == START_ATTEMPTS - 1 \
                        or "Address already in use" not in str(exc.__cause__):
                    raise
        raise AssertionError("not reached")

    def _start(self) -> InprocNode:
        config = parse_config(["--database", str(self.database),
                               *(arg for part, dsn in self.dsns.items()
                                 for arg in (f"--{part}-dsn", dsn)),
                               *self.extra_args])
        _log_to_threads()
        self.events, self.stderr_lines = [], []
        store = open_store(config)
        try:
            state = NodeState(config, store, Now.read())
        except BaseException:
            store.close()
            raise
        self._stop, self._waker, self._failure = StopRequest(), _Waker(), None
        self._thread = threading.Thread(target=self._serve, args=(state, self._waker,
                                                                 self._stop),
                                        name=f"pzq node {self.database.name}", daemon=True)
        self._thread.start()
        try:
            self.ask("PING", START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _serve(self, state: NodeState, waker: Waker, stop: StopRequest) -> None:
        _serving.node = self
        try:
            # on tcp, a context of its own that the node terminates at its end: its
            # ports are free again once it returns, for the restart
            run(state, waker, stop, NO_CURVE, shared=None if self.tcp else self.context)
        except BaseException as exc:  # handed to the test by stop() and ask()
            self._failure = exc
        finally:
            state.store.close()
            waker.close()
            _serving.node = None

    def log_line(self, line: str) -> None:
        """One line of the node's log, as a daemon writes it to stderr."""
        self.stderr_lines.append(line)
        self.events.append(json.loads(line))

    def event(self, name: str) -> dict[str, Any] | None:
        """The first logged event of that name since the node's last start."""
        return next((event for event in list(self.events) if event.get("event") == name),
                    None)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> int:
        """Stop as SIGTERM stops the daemon; 0 (the daemon's exit code then), or raises
        what the node's loop raised."""
        if self._thread is None:
            return 0
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
        return 0

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


AnyNode = InprocNode | NodeProcess  # what the flow helpers take: either node answers alike
