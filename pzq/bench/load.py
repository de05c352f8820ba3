"""Load generators, each run in its own process: raw pyzmq loops with a few operations
per message, so that the client is not what is measured."""

from __future__ import annotations

import struct
import time
from typing import Any

import zmq

from pzq.security import PLAIN, ClientSecurity
from pzq.zmqio import Socket, recv_frames, send_frames

COUNTER = struct.Struct(">Q")


NS = struct.Struct(">q")


SILENCE_MS = 5_000  # a target silent this long will not answer: stop and report


def _arrivals(socket: Socket, timeout_ms: int = SILENCE_MS) -> list[list[bytes]] | None:
    """Every message waiting after one poll; None if nothing came within the timeout."""
    if not socket.poll(timeout_ms):
        return None
    arrived = []
    while True:
        try:
            arrived.append(recv_frames(socket))
        except zmq.Again:
            return arrived


def produce_load(dsn: str, count: int, size: int, window: int, results: Any,
                 topics: int = 0, curve: ClientSecurity = PLAIN) -> None:
    """Send ``count`` messages keeping ``window`` unanswered; report rate and latencies.
    With ``topics``, each message goes to one of that many topics in turn; ``curve``:
    the producer's keys, for a node that serves CURVE."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    curve.apply(socket)
    socket.connect(dsn)
    headers = [b"TOPIC:t%d" % n for n in range(topics)]
    padding = b"x" * max(0, size - NS.size)
    sent_at: dict[bytes, int] = {}
    latencies = []
    sent = acked = 0
    started = last_ack = time.perf_counter()
    while acked < count:
        while sent < count and sent - acked < window:
            msg_id = COUNTER.pack(sent)
            now = time.perf_counter_ns()
            sent_at[msg_id] = now
            frames = [msg_id, b"", NS.pack(time.time_ns()) + padding]
            if headers:
                frames.insert(1, headers[sent % topics])
            send_frames(socket, frames)
            sent += 1
        arrived = _arrivals(socket)
        if arrived is None:
            break
        for frames in arrived:
            start = sent_at.pop(frames[0], None)
            if start is not None:
                latencies.append(time.perf_counter_ns() - start)
                acked += 1
        last_ack = time.perf_counter()
    # Up to the last ACK: a target that never answers some messages is not timed
    # for the silence that ended the run; "unanswered" says how many it left.
    results.put({"role": "producer", "count": acked, "seconds": last_ack - started,
                 "unanswered": sent - acked,
                 "latencies_ns": latencies[::max(1, len(latencies) // 20_000)]})
    context.destroy(linger=0)


def consume_load(dsns: list[str], count: int, results: Any) -> None:
    """Receive and ACK ``count`` messages; the body's first 8 bytes are the send time.
    Timed from the first arrival (the producers may start later)."""
    _consume(dsns, count, 0.0, results)


def drain_load(dsns: list[str], count: int, results: Any) -> None:
    """The same for a stored backlog, timed from the connect: whatever the target
    pushed into the socket buffers before the first read counts as time spent."""
    _consume(dsns, count, 0.0, results, from_connect=True)


def slow_consume_load(dsns: list[str], count: int, work_s: float, results: Any) -> None:
    """The same, spending ``work_s`` on each delivery as a consumer doing real work."""
    _consume(dsns, count, work_s, results)


def _send_waiting(socket: Socket, frames: list[bytes]) -> None:
    """Send, waiting for room while the pipe is full (the target reads it meanwhile),
    as long as a target's silence ends a run; then the answer is dropped."""
    deadline = time.monotonic() + SILENCE_MS / 1000
    while True:
        try:
            send_frames(socket, frames)
            return
        except zmq.Again:
            if time.monotonic() >= deadline:
                return
            socket.poll(100, zmq.POLLOUT)


def _consume(dsns: list[str], count: int, work_s: float, results: Any,
             from_connect: bool = False) -> None:
    """Count distinct messages (by body) and every delivery, duplicates included."""
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.RCVHWM, 1000)
    # an ACK waits for room rather than being dropped (a ROUTER drops what a full pipe
    # cannot take, and the target then sends the message again after its ack timeout)
    socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
    for dsn in dsns:
        socket.connect(dsn)
    latencies = []
    seen: set[bytes] = set()
    received = deliveries = 0
    last = time.perf_counter()
    started = last if from_connect else None
    while received < count:
        arrived = _arrivals(socket)
        if arrived is None:
            break
        for frames in arrived:
            if started is None:
                started = time.perf_counter()
            if work_s:
                time.sleep(work_s)  # the consumer's own work on the message
            _send_waiting(socket, [frames[0], frames[1], b"1"])
            body = frames[frames.index(b"", 2) + 1]
            deliveries += 1
            if body in seen:
                continue
            seen.add(body)
            latencies.append(time.time_ns() - NS.unpack_from(body)[0])
            received += 1
        last = time.perf_counter()
    elapsed = last - (started or last)
    results.put({"role": "consumer", "count": received, "deliveries": deliveries,
                 "seconds": elapsed,
                 "latencies_ns": latencies[::max(1, len(latencies) // 20_000)]})
    context.destroy(linger=0)
