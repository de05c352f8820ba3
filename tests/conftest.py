from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from pzq.client import Consumer, Producer
from tests.support.harness import NodeProcess, shown_on_failure
from tests.support.inproc import InprocNode

LOG_LINES_ON_FAILURE = 200

# The Spark JVMs the suite starts (its sessions and the scripts it runs) use only the
# quick JIT compiler: their jobs are small, and the optimising compiler's threads cost
# more CPU than they save (test_spark.py's CPU fell from 111 to 66 s with this).
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


class TrackingContext(zmq.Context):  # type: ignore[type-arg]
    """Keeps every socket it made, so a socket the test forgot cannot be closed
    quietly by the garbage collector: the fixture sees it and fails the test."""

    made: list[zmq.Socket]  # type: ignore[type-arg]

    def __init__(self) -> None:
        super().__init__()
        self.made = []

    def socket(self, *args: Any, **kwargs: Any) -> zmq.Socket:  # type: ignore[type-arg,override]
        socket = super().socket(*args, **kwargs)
        self.made.append(socket)
        return socket


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    """A context per test. A socket the test left open fails it (after being closed
    with linger 0, so a leak cannot hang the suite)."""
    ctx = TrackingContext()
    yield ctx
    leaked = [socket for socket in ctx.made if not socket.closed]
    for socket in leaked:
        socket.close(linger=0)
    ctx.term()
    if leaked:
        kinds = ", ".join(sorted(zmq.SocketType(socket.type).name for socket in leaked))
        pytest.fail(f"the test left {len(leaked)} socket(s) open: {kinds}", pytrace=False)


@pytest.fixture
def aio_context(context: zmq.Context) -> zmq.Context:
    """The asyncio clients' context for a test: on the test's context (its inproc
    endpoints, its leak check)."""
    from tests.support.aio import TrackedAsyncContext

    return TrackedAsyncContext(context)


@pytest.fixture
def open_socket(context: zmq.Context) -> Iterator[Callable[[int], zmq.Socket]]:
    """Raw sockets for a test, closed when it ends (before the leak check)."""
    opened: list[zmq.Socket] = []

    def make(kind: int) -> zmq.Socket:
        socket = context.socket(kind)
        opened.append(socket)
        return socket

    yield make
    for socket in opened:
        socket.close(linger=0)


@pytest.fixture
def closing(context: zmq.Context) -> Iterator[contextlib.ExitStack]:
    """Clients a test opens several of at once, closed when it ends."""
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    """A failing test shows the log of every node it started."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for node in (node for nodes in getattr(item, "pzq_nodes", []) for node in nodes):
            report.sections.append((f"pzq node {node.database.name}: last log lines",
                                    "\n".join(node.stderr_lines[-LOG_LINES_ON_FAILURE:])))


@pytest.fixture
def start_node(request: pytest.FixtureRequest,
               tmp_path: Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start real pzq daemons; every one still running is killed at teardown."""
    nodes: list[NodeProcess] = []
    shown_on_failure(request).append(nodes)

    def start(*extra_args: str, database: Path | None = None, **kwargs) -> NodeProcess:
        node = NodeProcess(database or tmp_path / f"db{len(nodes)}", *extra_args, **kwargs)
        nodes.append(node)
        return node.start()

    yield start
    for node in nodes:
        if node.running:
            node.kill()


@pytest.fixture
def start_inproc_node(request: pytest.FixtureRequest, context: zmq.Context,
                      tmp_path: Path) -> Iterator[Callable[..., InprocNode]]:
    """Start real nodes in this process (tests.support.inproc), on the test's context
    (or, ``tcp=True``, on loopback ports of their own); each is stopped at teardown,
    before the context's leak check, and a node whose loop failed fails the test."""
    nodes: list[InprocNode] = []
    shown_on_failure(request).append(nodes)

    def start(*options: str, database: Path | None = None, consume: bool = True,
              tcp: bool = False) -> InprocNode:
        node = InprocNode(context, database or tmp_path / f"inproc{len(nodes)}", *options,
                          consume=consume, tcp=tcp)
        nodes.append(node)
        return node.start()

    yield start
    failures = []
    for node in nodes:
        try:
            node.stop()
        except Exception as exc:  # stop the others before saying so
            failures.append(exc)
    if failures:
        raise failures[0]


@pytest.fixture
def curve_keys(tmp_path: Path) -> dict[str, Any]:
    """Key pairs of a node, a client and a stranger in ``tmp_path/keys``, the node's and
    the client's public keys authorized: the node's options (``args``), each client's
    ClientCurve, and the files the tools and Spark take (``files``)."""
    from pzq import security
    from pzq.security import ClientCurve

    made = {name: security.generate(tmp_path / "keys", name)
            for name in ("node", "client", "stranger")}
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    for name in ("node", "client"):
        (authorized / f"{name}.key").write_bytes(made[name][0].read_bytes())
    strangers = tmp_path / "authorized-by-the-stranger"
    strangers.mkdir()
    for name in ("stranger", "client"):
        (strangers / f"{name}.key").write_bytes(made[name][0].read_bytes())
    pairs = {name: security.load_key_pair(secret) for name, (_, secret) in made.items()}
    node_public = pairs["node"].public
    return {
        "args": ["--curve-secret-key", str(made["node"][1]),
                 "--curve-authorized-keys", str(authorized)],
        "client": ClientCurve(pairs["client"], node_public),
        "stranger": ClientCurve(pairs["stranger"], node_public),
        # A node of the stranger's own: it admits its own key and the client's, the
        # node above admits neither the stranger nor it.
        "stranger_args": ["--curve-secret-key", str(made["stranger"][1]),
                          "--curve-authorized-keys", str(strangers)],
        "files": {"client": str(made["client"][1]), "stranger": str(made["stranger"][1]),
                  "node": str(made["node"][0])},
    }


NODE_OPTIONS = ("--ack-timeout", "1000000", "--reaper-frequency", "100000")


@pytest.fixture
def node(start_node: Callable[..., NodeProcess]) -> NodeProcess:
    return start_node(*NODE_OPTIONS)


@pytest.fixture
def inproc_node(start_inproc_node: Callable[..., InprocNode]) -> InprocNode:
    """The ``node`` fixture's node in this process, on loopback ports of its own: a
    module whose tests need no daemon makes it its ``node`` (and so the ``producer``'s
    and the ``consumer``'s)."""
    return start_inproc_node(*NODE_OPTIONS, consume=False, tcp=True)


@pytest.fixture
def producer(node: NodeProcess, context: zmq.Context) -> Iterator[Producer]:
    with Producer(node.receive_dsn, window=100, context=context) as p:
        yield p


@pytest.fixture
def consumer(node: NodeProcess, context: zmq.Context) -> Iterator[Consumer]:
    with Consumer(node.send_dsn, context=context) as c:
        yield c


@pytest.fixture
def archived_node(start_inproc_node, tmp_path):
    """A node archiving in ``tmp_path/archive`` in small segments, its ZPER reader
    endpoint on a loopback port, in this process."""
    return archiving(start_inproc_node(*archive_options(tmp_path), consume=False, tcp=True),
                     tmp_path)


@pytest.fixture
def archived_daemon(start_node, tmp_path):
    """``archived_node``'s node as a daemon (to be SIGKILLed)."""
    return archiving(start_node(*archive_options(tmp_path)), tmp_path)


def archive_options(tmp_path: Path) -> tuple[str, ...]:
    return ("--archive-dir", str(tmp_path / "archive"), "--archive-dsn", "tcp://127.0.0.1:*",
            "--segment-size", "600", "--flush-messages", "5", "--flush-interval", "100",
            "--ack-timeout", "60000000", "--hard-sync")


def archiving(node: Any, tmp_path: Path) -> Any:
    node.archive_dir = tmp_path / "archive"
    node.archive_dsn = node.event("node_ready")["archive"]
    return node
