"""The ceiling: a minimal pyzmq device that ACKs every message at once, keeps nothing
and passes messages on from memory, with the same socket calls as pzq."""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from typing import Any

import zmq

from pzq.bench.load import COUNTER, NS
from pzq.tool_base import interrupted_quietly
from pzq.zmqio import Socket, drain, send_frames


def ceiling_device(receive: str, send: str, preload: int, size: int, ready: Any) -> None:
    """ACK every producer message at once and pass it on from memory; store nothing.
    ``preload`` synthetic messages are offered to consumers first (the drain ceiling).
    It uses the same integer-flag socket calls as pzq, so it is as fast as Python
    on these sockets gets."""
    context = zmq.Context()
    front = context.socket(zmq.ROUTER)
    front.setsockopt(zmq.SNDHWM, 0)
    front.bind(receive)
    back = context.socket(zmq.DEALER)
    back.setsockopt(zmq.SNDHWM, 256)
    back.bind(send)
    ready.set()
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    padding = b"x" * max(0, size - NS.size)
    waiting: deque[list[bytes]] = deque()
    remaining = preload
    while True:
        wants_out = zmq.POLLOUT if waiting or remaining else 0
        poller.register(back, zmq.POLLIN | wants_out)
        events = dict(poller.poll(1000))
        if events.get(front, 0) & zmq.POLLIN:
            for routing_id, msg_id, *rest in drain(front, 4096):
                send_frames(front, [routing_id, msg_id, b"1", b""])
                waiting.append([msg_id, b"0", b"5000000", b"", *rest[1:]])
        if events.get(back, 0) & zmq.POLLIN:
            for _ in drain(back, 1 << 30):
                pass  # consumer ACKs: nothing is kept, nothing to remove
        if events.get(back, 0) & zmq.POLLOUT:
            remaining = _pass_on(back, waiting, remaining, padding)


def _pass_on(back: Socket, waiting: deque[list[bytes]], remaining: int,
             padding: bytes) -> int:
    """Send what waits, then preloaded messages, until the consumers take no more;
    returns how many preloaded ones are left."""
    while waiting or remaining:
        if not waiting:
            waiting.append([COUNTER.pack(remaining), b"0", b"5000000", b"",
                            NS.pack(time.time_ns()) + padding])
            remaining -= 1
        try:
            send_frames(back, waiting[0])
        except zmq.Again:
            break
        waiting.popleft()
    return remaining


class Ceiling:
    """The ceiling device in its own process on wildcard-free loopback ports."""

    def __init__(self, preload: int = 0, size: int = 100) -> None:
        self.receive_dsn, self.send_dsn = free_endpoint(), free_endpoint()
        spawn = multiprocessing.get_context("spawn")
        ready = spawn.Event()
        self.process = spawn.Process(target=interrupted_quietly,
                                     args=(ceiling_device, self.receive_dsn, self.send_dsn,
                                           preload, size, ready),
                                     daemon=True)
        self.process.start()
        ready.wait(30)

    def stop(self) -> None:
        self.process.kill()
        self.process.join(10)


def free_endpoint() -> str:
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"
