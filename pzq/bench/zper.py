"""Measurements of the archive as a ZPER broker, each beside its baseline in one run.

* ZPWriter, mode 0 and mode 1, messages and MB per second, against the *echo
  ceiling* (a pyzmq ROUTER with the same socket calls that keeps nothing: it only
  counts in mode 0 and answers every message at once in mode 1) and against ``dd``
  writing the same bytes to the same disk (``conv=fdatasync``, the disk's limit).
* FETCH MB/s against reading the same segment files, and against the FETCH
  ceiling (a pyzmq ROUTER answering from memory without a copy, the same client).
* Spark batch rows/s against the same rows read from Parquet.
* Streaming: from a ZPER producer's write to the row in a streaming query's sink.
"""

from __future__ import annotations

import multiprocessing
import statistics
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import zmq

from pzq.bench.ceiling import free_endpoint
from pzq.bench.measure import percentile
from pzq.bench.nodes import NodeProcess, wait_until
from pzq.protocol import zper as zp
from pzq.tool_base import interrupted_quietly
from pzq.zmqio import drain, send_frames

ID = struct.Struct(">Q")
MB = 1e6


# -- load and the echo ceiling (spawned processes) ----------------------------------------

def write_load(dsn: str, topic: str, mode: int, count: int, size: int, results: Any) -> None:
    """Send ``count`` messages [id, body]; in mode 1 wait for the reply naming the last."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic, mode))
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.connect(dsn)
    body = b"x" * size
    last = ID.pack(count - 1)
    time.sleep(0.2)  # connected before the clock starts
    started = time.time()
    for n in range(count):
        socket.send_multipart([ID.pack(n), body], copy=False)
    answered = mode == 0
    while not answered and socket.poll(30_000):
        answered = socket.recv_multipart()[-1] == last
        while not answered and socket.poll(0):
            answered = socket.recv_multipart()[-1] == last
    results.put({"started": started, "finished": time.time(), "answered": answered})
    socket.close(linger=30_000)  # mode 0: the messages still queued go out first
    context.term()


def echo_ceiling(dsn: str, count: int, echo: bool, ready: Any, results: Any) -> None:
    """Take ``count`` messages as the node's writer socket does; answer each if ``echo``."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, 100_000)
    router.bind(dsn)
    ready.set()
    taken = 0
    while taken < count and router.poll(30_000):
        for identity, message_id, *_ in drain(router, 4096):
            taken += 1
            if echo:
                send_frames(router, [identity, message_id])
    results.put({"finished": time.time(), "taken": taken})
    context.destroy(linger=0)


def _spawned(target: Any, *args: Any) -> tuple[multiprocessing.process.BaseProcess, Any]:
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    process = spawn.Process(target=interrupted_quietly, args=(target, *args, results),
                            daemon=True)
    process.start()
    return process, results


def measure_ceiling(mode: int, count: int, size: int) -> float:
    """Seconds for the echo ceiling to take ``count`` messages (mode 1: and answer)."""
    dsn = free_endpoint()
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    device, device_results = _spawned(echo_ceiling, dsn, count, mode == 1, ready)
    ready.wait(30)
    producer, results = _spawned(write_load, dsn, "bench", mode, count, size)
    load = results.get(timeout=600)
    end = device_results.get(timeout=600)["finished"] if mode == 0 else load["finished"]
    for process in (producer, device):
        process.join(30)
    return float(end - load["started"])


def measure_writer(node: NodeProcess, dsn: str, topic: str, mode: int, count: int,
                   size: int) -> float:
    """Seconds for the node's writer to take ``count`` messages (mode 1: durable and
    answered; mode 0: all written, seen in STATS)."""
    before = int(node.stats()["zper"]["writer"]["written"])
    producer, results = _spawned(write_load, dsn, topic, mode, count, size)
    if mode == 0:
        # STATS every 50 ms until 90 % are written, not to slow the node it measures,
        # then every 10 ms to see the end.
        def written() -> int:
            return int(node.stats()["zper"]["writer"]["written"]) - before

        wait_until(lambda: written() >= count * 0.9, 600, interval=0.05, message="90 %")
        wait_until(lambda: written() >= count, 600, interval=0.01, message="written")
        finished = time.time()
        load = results.get(timeout=60)
    else:
        load = results.get(timeout=600)
        finished = load["finished"]
        assert load["answered"], "mode 1 never answered the last write"
    producer.join(30)
    return float(finished - load["started"])


def dd_seconds(directory: Path, size_bytes: int) -> float:
    """``dd`` writing ``size_bytes`` sequentially, fdatasync'd at the end."""
    target = directory / "dd.out"
    blocks = max(1, size_bytes // (1 << 20))
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={blocks}",
                    "conv=fdatasync"], check=True, capture_output=True)
    seconds = time.perf_counter() - started
    target.unlink()
    return seconds * size_bytes / (blocks << 20)


# -- reading -------------------------------------------------------------------------------

def fetch_seconds(dsn: str, topic: str, end: int) -> float:
    """Reading a topic from 0 to ``end`` with FETCH, 1 MiB at a time."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic))
    socket.connect(dsn)
    started = time.perf_counter()
    position = 0
    while position < end:
        socket.send_multipart(zp.encode_fetch_request(position, 1 << 20))
        status, data = socket.recv_multipart()
        assert status[0] == zp.OK and data
        position += len(data)
    seconds = time.perf_counter() - started
    context.destroy(linger=0)
    return seconds


def fetch_server(dsn: str, size: int, ready: Any, results: Any) -> None:
    """The FETCH ceiling: a ROUTER answering FETCH from ``size`` bytes in memory, each
    reply lent to ZeroMQ (no copy), until asked for a negative offset."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.bind(dsn)
    ready.set()
    data = memoryview(b"x" * size)
    while router.poll(30_000):
        identity, *request = router.recv_multipart()
        offset, max_bytes = zp.decode_fetch_request(request)
        if offset < 0:
            break
        router.send_multipart([identity, bytes((zp.OK,)), data[offset:offset + max_bytes]],
                              copy=False)
    results.put({})
    context.destroy(linger=0)


def fetch_ceiling_seconds(size: int) -> float:
    """Reading ``size`` bytes 1 MiB at a time, as ``fetch_seconds`` does, from the
    FETCH ceiling (the best of two reads)."""
    dsn = free_endpoint()
    ready = multiprocessing.get_context("spawn").Event()
    server, results = _spawned(fetch_server, dsn, size, ready)
    ready.wait(30)
    seconds = min(fetch_seconds(dsn, "bench", size) for _ in range(2))
    context = zmq.Context()
    stop = context.socket(zmq.DEALER)
    stop.connect(dsn)
    stop.send_multipart(zp.encode_fetch_request(-1, 0))
    results.get(timeout=30)
    context.destroy(linger=0)
    server.join(30)
    return seconds


def file_read_seconds(directory: Path) -> float:
    """Reading the same segment files, 1 MiB at a time."""
    started = time.perf_counter()
    for path in sorted(directory.glob("*.dat")):
        with path.open("rb", buffering=0) as handle:
            while handle.read(1 << 20):
                pass
    return time.perf_counter() - started


def spark_rows_per_second(spark: Any, archive: Path, parquet: Path,
                          rounds: int = 3) -> tuple[float, float, int]:
    """(zper rows/s, Parquet rows/s, rows): every column materialised (the noop sink),
    the two read in turn ``rounds`` times after a warm-up, the median of each."""
    zper = spark.read.format("zper").load(str(archive))
    rows = zper.count()
    zper.write.mode("overwrite").parquet(str(parquet))
    frames = (zper, spark.read.parquet(str(parquet)))
    timings: tuple[list[float], list[float]] = ([], [])
    for frame in frames:
        frame.write.format("noop").mode("overwrite").save()  # warm: JVM, workers, caches
    for _ in range(rounds):  # in turn, so a busy moment of the machine slows both
        for frame, seconds in zip(frames, timings, strict=True):
            started = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            seconds.append(time.perf_counter() - started)
    return rows / statistics.median(timings[0]), rows / statistics.median(timings[1]), rows


def stream_latencies_ms(spark: Any, archive: Path, checkpoint: Path, writer_dsn: str,
                        topic: str, rate: int, seconds: float) -> list[float]:
    """Write ``rate`` messages a second for ``seconds`` through the writer (mode 0),
    each carrying its send time; the time each reaches a streaming query's sink."""
    latencies: list[float] = []

    def sink(batch: Any, _: int) -> None:
        rows = batch.select("parts").collect()
        now = time.time_ns()
        latencies.extend((now - ID.unpack(row.parts[1])[0]) / 1e6 for row in rows)

    query = (spark.readStream.format("zper").option("topics", topic)
             .option("startingOffsets", "latest").load(str(archive))
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .start())
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, zp.make_identity(topic, 0))
    socket.connect(writer_dsn)
    try:
        wait_until(lambda: query.lastProgress is not None, 120, message="the query running")
        total = int(rate * seconds)
        started = time.perf_counter()
        for n in range(total):
            pause = started + n / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            socket.send_multipart([ID.pack(n), ID.pack(time.time_ns())])
        wait_until(lambda: len(latencies) >= total, 120, interval=0.05, message="every row")
    finally:
        # Stopping interrupts the query's thread, which Spark and Hadoop log as
        # warnings with Java stack traces: noise once every row was measured.
        spark.sparkContext.setLogLevel("ERROR")
        query.stop()
        context.destroy(linger=0)
    return latencies


def quantiles(values_ms: list[float]) -> tuple[float, float]:
    as_ns = [int(value * 1e6) for value in values_ms]
    return percentile(as_ns, 0.5), percentile(as_ns, 0.99)
