from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
import zmq

sys.path.insert(0, str(Path(__file__).parent))

from harness import NodeProcess  # noqa: E402

from pzq.client import Consumer, Producer  # noqa: E402


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    """A context per test; destroyed with linger 0 so a leaked socket cannot hang it."""
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start real pzq daemons; every one still running is killed at teardown."""
    nodes: list[NodeProcess] = []

    def start(*extra_args: str, database: Path | None = None, **kwargs) -> NodeProcess:
        node = NodeProcess(database or tmp_path / f"db{len(nodes)}", *extra_args, **kwargs)
        nodes.append(node)
        return node.start()

    yield start
    for node in nodes:
        if node.running:
            node.kill()


@pytest.fixture
def node(start_node: Callable[..., NodeProcess]) -> NodeProcess:
    return start_node("--ack-timeout", "1000000", "--reaper-frequency", "100000")


@pytest.fixture
def producer(node: NodeProcess, context: zmq.Context) -> Iterator[Producer]:
    with Producer(node.receive_dsn, window=100, context=context) as p:
        yield p


@pytest.fixture
def consumer(node: NodeProcess, context: zmq.Context) -> Iterator[Consumer]:
    with Consumer(node.send_dsn, context=context) as c:
        yield c
