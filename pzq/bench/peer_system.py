"""What the benchmark beside the peers needs of each system it measures: a server
started for one workload and stopped after it, and load generators with one
signature for every system (each runs in its own process)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setup:
    """How a workload wants its server: fsync before each ACK or not, the groups of
    the one topic (stream), and their ack timeout in seconds (None: the server's)."""

    fsync: bool = False
    groups: tuple[str, ...] = ()
    ack_timeout: float | None = None


@dataclass(frozen=True)
class Served:
    """A running server: its process (for its CPU time) and where clients connect."""

    pid: int
    address: dict[str, str]


@dataclass(frozen=True)
class AsyncioClient:
    """A system's asyncio client, as its ``produce`` and ``consume`` load generators
    (the same signatures as the system's own); each runs one event loop."""

    produce: Callable[..., None]
    consume: Callable[..., None]


@dataclass(frozen=True)
class System:
    """One system, measured with its own Python client. The load generators (``start``
    is an Event, ``ready`` an Event or a Barrier, or None):

    * ``produce(address, count, size, window, start, results)``: once ``start`` is set
    * ``consume(address, group, count, window, from_start, ready, results)``: read
      and ACK, timed from its start or its first delivery; once it has joined,
      ``ready`` is set, or waited at (a Barrier: the consumers start together)
    * ``hold(address, group, count, results)``: read ``count``, never ACK, hang
    * ``claim(address, group, count, ack_timeout, go, results)``: once ``go`` is set,
      join the group and take what another consumer held

    ``asyncio``: its asyncio client, measured in the asyncio rows; ``NATIVE`` when
    its one client is asyncio already (its own rows are its asyncio rows); None: it
    has none.
    """

    name: str  # as the table heads its column
    short: str  # as a ratio's column names it: pzq/<short>
    missing: Callable[[], str | None]  # what it lacks to be measured, or None
    serve: Callable[[Path, Setup], AbstractContextManager[Served]]
    produce: Callable[..., None]
    consume: Callable[..., None]
    hold: Callable[..., None]
    claim: Callable[..., None]
    asyncio: AsyncioClient | None = None


NATIVE = AsyncioClient(lambda *args: None, lambda *args: None)  # its own client is asyncio
