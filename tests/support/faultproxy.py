"""A fault-injecting TCP proxy for the links between cluster nodes, on loopback.

One ``LinkProxy`` carries the connections one node's DEALER makes to one peer's
ROUTER, so every directed pair of nodes has its own proxy. Bytes travel two ways
on such a connection: ``UP`` (the connecting node's requests: PING, REPLICATE,
REMOVE) and ``DOWN`` (the peer's answers on the same connection). Per proxy:

- pass: bytes flow (after ``latency_s`` if set), in order;
- drop ``UP`` and/or ``DOWN`` (a blackhole is both): bytes vanish silently and
  new connections are accepted but carry nothing. A TCP stream never resumes
  after a gap, so a connection that lost bytes is reset when the proxy heals
  (the sender's TCP would have given up on it);
- reset: connections are closed with RST, and new ones are accepted and reset
  at once (the peer keeps reconnecting, as to a refusing port).

A node's PING names its own --broadcast-dsn, and the receiving node accepts it
only if that endpoint is in its --nodes. Here a node reaches each peer through a
proxy, so ``announce_as`` rewrites the endpoint in every PING passing ``UP`` to the
proxy endpoint the receiving node uses for the sender (``zmtp_ping``; plain-text
NULL mechanism only, no CURVE). Nothing else in the stream is touched.

``ProxyNetwork`` runs every proxy on one asyncio loop in a background thread;
its methods are safe to call from any thread and return once the change applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tests.support.zmtp_ping import PingRewriter

T = TypeVar("T")

UP, DOWN = "up", "down"
DIRECTIONS = (UP, DOWN)
HOST = "127.0.0.1"
CHUNK = 65536
CALL_TIMEOUT = 10.0



# -- one proxied connection ---------------------------------------------------------------


@dataclass
class Faults:
    drop: set[str] = field(default_factory=set)  # directions whose bytes vanish
    reset: bool = False
    latency_s: float = 0.0


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST, as a TCP stack that gave up on the connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Connection:
    def __init__(self, proxy: LinkProxy, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 server: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self.proxy = proxy
        self.client_reader, self.client_writer = client
        self.server_reader, self.server_writer = server
        self.gap = False  # bytes were dropped: the stream cannot go on after a heal
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        announce = self.proxy.announce_as
        rewrite = PingRewriter(announce).feed if announce else None
        self.tasks = [
            asyncio.ensure_future(self._pump(UP, self.client_reader, self.server_writer, rewrite)),
            asyncio.ensure_future(self._pump(DOWN, self.server_reader, self.client_writer, None)),
        ]

    async def _pump(self, direction: str, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter,
                    rewrite: Callable[[bytes], bytes] | None) -> None:
        """Read, then hand each chunk to the writer when its latency is over."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        sending = asyncio.ensure_future(self._send(direction, queue, writer))
        self.tasks.append(sending)
        try:
            while data := await reader.read(CHUNK):
                if self._dropping(direction, len(data)):
                    continue
                if rewrite is not None:
                    data = rewrite(data)
                queue.put_nowait((time.monotonic() + self.proxy.faults.latency_s, data))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait(None)
        with contextlib.suppress(ConnectionError, OSError):
            await sending
        self.close()

    async def _send(self, direction: str, queue: asyncio.Queue[tuple[float, bytes] | None],
                    writer: asyncio.StreamWriter) -> None:
        while (item := await queue.get()) is not None:
            due, data = item
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            if self._dropping(direction, len(data)):
                continue  # cut while the bytes were on their way
            writer.write(data)
            await writer.drain()

    def _dropping(self, direction: str, size: int) -> bool:
        if direction in self.proxy.faults.drop:
            self.gap = True
            self.proxy.dropped[direction] += size
            return True
        return False

    def close(self) -> None:
        self.reset()

    def reset(self) -> None:
        for writer in (self.client_writer, self.server_writer):
            _abort(writer)
        for task in self.tasks:
            task.cancel()
        self.proxy.connections.discard(self)


# -- one proxy per directed pair -----------------------------------------------------------


class LinkProxy:
    """Listens on a free loopback port, or at the unix socket ``listen``; forwards each
    connection to ``target``, a loopback port or a unix socket's path."""

    def __init__(self, name: str, target: int | str, announce_as: str | None,
                 listen: str | None = None) -> None:
        self.name = name
        self.target = target
        self.listen = listen
        self.announce_as = announce_as
        self.faults = Faults()
        self.connections: set[Connection] = set()
        self.accepted = 0
        self.dropped = {UP: 0, DOWN: 0}  # bytes
        self.server: asyncio.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.listen}" if self.listen else f"tcp://{HOST}:{self.port}"

    async def start(self) -> None:
        if self.listen:
            self.server = await asyncio.start_unix_server(self._accept, self.listen)
            return
        self.server = await asyncio.start_server(self._accept, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if isinstance(self.target, str):
            return await asyncio.open_unix_connection(self.target)
        return await asyncio.open_connection(HOST, self.target)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.faults.reset:
            _abort(writer)
            return
        try:
            server = await self._connect()
        except OSError:
            _abort(writer)  # the peer is not listening: refused, as without a proxy
            return
        connection = Connection(self, (reader, writer), server)
        if self.faults.reset:  # set while we were connecting
            connection.reset()
            return
        self.connections.add(connection)
        connection.start()

    def apply(self, faults: Faults) -> None:
        self.faults = faults
        if faults.reset:
            for connection in list(self.connections):
                connection.reset()

    def heal(self) -> None:
        """Pass everything again, without delay; connections that lost bytes are reset."""
        self.faults = Faults()
        for connection in [c for c in self.connections if c.gap]:
            connection.reset()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for connection in list(self.connections):
            connection.reset()


class ProxyNetwork:
    """Every proxy of a test on one event loop in a background thread."""

    def __init__(self) -> None:
        self.proxies: dict[str, LinkProxy] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultproxy",
                                        daemon=True)
        self._thread.start()

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await make()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(CALL_TIMEOUT)

    def _do(self, action: Callable[[], None]) -> None:
        async def run() -> None:
            action()
        self._call(run)

    def add(self, name: str, target: int | str, announce_as: str | None = None,
            listen: str | None = None) -> LinkProxy:
        proxy = LinkProxy(name, target, announce_as, listen)
        self._call(proxy.start)
        self.proxies[name] = proxy
        return proxy

    def set_announce(self, name: str, endpoint: str) -> None:
        self._do(lambda: setattr(self.proxies[name], "announce_as", endpoint))

    # -- faults, each on a list of proxy names ----------------------------------------

    def blackhole(self, names: list[str]) -> None:
        self._apply(names, lambda old: Faults(set(DIRECTIONS), False, old.latency_s))

    def drop(self, names: list[str], direction: str) -> None:
        """Drop one direction only; the other keeps flowing."""
        self._apply(names, lambda old: Faults(old.drop | {direction}, old.reset, old.latency_s))

    def reset(self, names: list[str]) -> None:
        self._apply(names, lambda old: Faults(set(), True, old.latency_s))

    def delay(self, names: list[str], seconds: float) -> None:
        self._apply(names, lambda old: Faults(set(old.drop), old.reset, seconds))

    def heal(self, names: list[str] | None = None) -> None:
        def heal_all() -> None:
            for name in names if names is not None else list(self.proxies):
                self.proxies[name].heal()
        self._do(heal_all)

    def _apply(self, names: list[str], change: Callable[[Faults], Faults]) -> None:
        def apply_all() -> None:
            for name in names:
                proxy = self.proxies[name]
                proxy.apply(change(proxy.faults))
        self._do(apply_all)

    # -- figures and life cycle -------------------------------------------------------

    def connections(self, name: str) -> int:
        return self._call(lambda: _value(len(self.proxies[name].connections)))

    def dropped(self, name: str, direction: str) -> int:
        """Bytes the proxy ``name`` has dropped in ``direction`` so far."""
        return self._call(lambda: _value(self.proxies[name].dropped[direction]))

    def close(self) -> None:
        async def stop_all() -> None:
            for proxy in self.proxies.values():
                await proxy.stop()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
        with contextlib.suppress(Exception):
            self._call(stop_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT)
        self._loop.close()

    def __enter__(self) -> ProxyNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _value(value: T) -> T:
    return value
