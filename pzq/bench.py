"""pzq-bench: pzq against its ceiling, measured in one run on the same sockets.

The ceiling is a minimal pyzmq device that ACKs every message at once and stores
nothing, driven by the same load generators; every pzq figure is also reported as
a ratio to it. Load generators are raw pyzmq loops in their own processes, so the
client is not what is measured (the ceiling shows what they reach).

    scripts/bench.py --quick                  about a minute
    scripts/bench.py --json out.json --png out.png
"""

from __future__ import annotations

import json
import multiprocessing
import struct
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import zmq

from pzq.launcher import NodeProcess, wait_until
from pzq.tool_args import ToolParser
from pzq.zmqio import recv_frames, send_frames

COUNTER = struct.Struct(">Q")
NS = struct.Struct(">q")


# -- load generators (each runs in its own process) ---------------------------------

def _arrivals(socket: zmq.Socket, timeout_ms: int = 30_000) -> list[list[bytes]] | None:
    """Every message waiting after one poll; None if nothing came within the timeout."""
    if not socket.poll(timeout_ms):
        return None
    arrived = []
    while True:
        try:
            arrived.append(recv_frames(socket))
        except zmq.Again:
            return arrived


def produce_load(dsn: str, count: int, size: int, window: int, results: Any) -> None:
    """Send ``count`` messages keeping ``window`` unanswered; report rate and latencies."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.connect(dsn)
    padding = b"x" * max(0, size - NS.size)
    sent_at: dict[bytes, int] = {}
    latencies = []
    sent = acked = 0
    started = time.perf_counter()
    while acked < count:
        while sent < count and sent - acked < window:
            msg_id = COUNTER.pack(sent)
            now = time.perf_counter_ns()
            sent_at[msg_id] = now
            send_frames(socket, [msg_id, b"", NS.pack(time.time_ns()) + padding])
            sent += 1
        arrived = _arrivals(socket)
        if arrived is None:
            break
        for frames in arrived:
            start = sent_at.pop(frames[0], None)
            if start is not None:
                latencies.append(time.perf_counter_ns() - start)
                acked += 1
    elapsed = time.perf_counter() - started
    results.put({"role": "producer", "count": acked, "seconds": elapsed,
                 "latencies_ns": latencies[::max(1, len(latencies) // 20_000)]})
    context.destroy(linger=0)


def consume_load(dsns: list[str], count: int, results: Any) -> None:
    """Receive and ACK ``count`` messages; the body's first 8 bytes are the send time."""
    _consume(dsns, count, 0.0, results)


def slow_consume_load(dsns: list[str], count: int, work_s: float, results: Any) -> None:
    """The same, spending ``work_s`` on each delivery as a consumer doing real work."""
    _consume(dsns, count, work_s, results)


def _consume(dsns: list[str], count: int, work_s: float, results: Any) -> None:
    """Count distinct messages (by body) and every delivery, duplicates included."""
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.RCVHWM, 1000)
    for dsn in dsns:
        socket.connect(dsn)
    latencies = []
    seen: set[bytes] = set()
    received = deliveries = 0
    started = None
    while received < count:
        arrived = _arrivals(socket)
        if arrived is None:
            break
        for frames in arrived:
            if started is None:
                started = time.perf_counter()
            if work_s:
                time.sleep(work_s)  # the consumer's own work on the message
            send_frames(socket, [frames[0], frames[1], b"1"])
            body = frames[frames.index(b"", 2) + 1]
            deliveries += 1
            if body in seen:
                continue
            seen.add(body)
            latencies.append(time.time_ns() - NS.unpack_from(body)[0])
            received += 1
    elapsed = time.perf_counter() - (started or time.perf_counter())
    results.put({"role": "consumer", "count": received, "deliveries": deliveries,
                 "seconds": elapsed,
                 "latencies_ns": latencies[::max(1, len(latencies) // 20_000)]})
    context.destroy(linger=0)


# -- the ceiling ------------------------------------------------------------------------

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
            for _ in range(4096):
                try:
                    routing_id, msg_id, *rest = recv_frames(front)
                except zmq.Again:
                    break
                send_frames(front, [routing_id, msg_id, b"1", b""])
                waiting.append([msg_id, b"0", b"5000000", b"", *rest[1:]])
        if events.get(back, 0) & zmq.POLLIN:
            while True:
                try:
                    recv_frames(back)
                except zmq.Again:
                    break
        while (waiting or remaining) and events.get(back, 0) & zmq.POLLOUT:
            if not waiting:
                waiting.append([COUNTER.pack(remaining), b"0", b"5000000", b"",
                                NS.pack(time.time_ns()) + padding])
                remaining -= 1
            try:
                send_frames(back, waiting[0])
            except zmq.Again:
                break
            waiting.popleft()


# -- runs --------------------------------------------------------------------------------

@dataclass
class Figure:
    scenario: str
    target: str  # "pzq" or "ceiling"
    rate: float  # messages per second
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    rss_mb: float = 0.0
    ratio: float | None = None  # pzq rate / ceiling rate
    extra: dict[str, Any] = field(default_factory=dict)


def _ratio(value: float, ceiling: float) -> float | None:
    return round(value / ceiling, 3) if ceiling else None


def _percentile(values: list[int], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1e6


def _run(workers: list[tuple[Callable[..., None], tuple]]) -> list[dict[str, Any]]:
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    processes = [spawn.Process(target=target, args=(*args, results)) for target, args in workers]
    for process in processes:
        process.start()
    answers = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join(30)
    return answers


def measure_produce(dsn: str, count: int, size: int, window: int) -> tuple[float, float, float]:
    (answer,) = _run([(produce_load, (dsn, count, size, window))])
    latencies = answer["latencies_ns"]
    return answer["count"] / answer["seconds"], _percentile(latencies, .5), _percentile(
        latencies, .99)


def measure_drain(dsn: str, count: int) -> float:
    (answer,) = _run([(consume_load, ([dsn], count))])
    return answer["count"] / max(answer["seconds"], 1e-9)


def measure_end_to_end(receive: str, send: str, count: int, size: int,
                       window: int) -> tuple[float, float, float]:
    answers = _run([(consume_load, ([send], count)), (produce_load, (receive, count, size,
                                                                     window))])
    consumer = next(a for a in answers if a["role"] == "consumer")
    producer = next(a for a in answers if a["role"] == "producer")
    seconds = max(consumer["seconds"], producer["seconds"])
    latencies = consumer["latencies_ns"]
    return consumer["count"] / seconds, _percentile(latencies, .5), _percentile(latencies, .99)


class Ceiling:
    """The ceiling device in its own process on wildcard-free loopback ports."""

    def __init__(self, preload: int = 0, size: int = 100) -> None:
        self.receive, self.send = _free_endpoint(), _free_endpoint()
        spawn = multiprocessing.get_context("spawn")
        ready = spawn.Event()
        self.process = spawn.Process(target=ceiling_device,
                                     args=(self.receive, self.send, preload, size, ready),
                                     daemon=True)
        self.process.start()
        ready.wait(30)

    def stop(self) -> None:
        self.process.kill()
        self.process.join(10)


def _free_endpoint() -> str:
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def rss_mb(node: NodeProcess) -> float:
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_pzq(directory: Path, name: str, *args: str) -> NodeProcess:
    return NodeProcess(directory / name, *args).start()


def fill(node: NodeProcess, count: int, size: int) -> None:
    """Store a backlog fast: several windowed producers at once."""
    share = count // 4
    _run([(produce_load, (node.receive_dsn, share, size, 1000)) for _ in range(4)])


# -- the benchmark ----------------------------------------------------------------------

@dataclass
class Plan:
    produce_count: int
    window1_count: int
    drain_count: int
    backlogs: tuple[int, ...]
    slow_count: int = 300
    sizes: tuple[int, ...] = (100, 4096)
    windows: tuple[int, ...] = (1, 100, 1000)


PLANS = {
    "smoke": Plan(300, 50, 300, (0, 500), sizes=(100,), windows=(1, 100)),
    "quick": Plan(5_000, 500, 5_000, (0, 20_000, 100_000), sizes=(100, 4096),
                  slow_count=1_500),
    "full": Plan(30_000, 2_000, 30_000, (0, 100_000, 1_000_000), slow_count=3_000),
}


def run_benchmark(plan: Plan, directory: Path) -> list[Figure]:
    figures: list[Figure] = []

    def record(scenario: str, ceiling: tuple[float, float, float],
               node_figures: tuple[float, float, float], **extra: Any) -> None:
        figures.append(Figure(scenario, "ceiling", ceiling[0], ceiling[1], ceiling[2]))
        figures.append(Figure(scenario, "pzq", node_figures[0], node_figures[1],
                              node_figures[2], ratio=_ratio(node_figures[0], ceiling[0]),
                              extra=extra))

    for size in plan.sizes:
        for window in plan.windows:
            count = plan.window1_count if window == 1 else plan.produce_count
            ceiling = Ceiling()
            base = measure_produce(ceiling.receive, count, size, window)
            ceiling.stop()
            node = start_pzq(directory, f"produce-{size}-{window}")
            record(f"produce {size} B window {window}", base,
                   measure_produce(node.receive_dsn, count, size, window))
            node.kill()

    size, window = 100, 100
    ceiling = Ceiling(preload=plan.drain_count, size=size)
    drain_base = measure_drain(ceiling.send, plan.drain_count)
    ceiling.stop()
    node = start_pzq(directory, "drain")
    fill(node, plan.drain_count, size)
    record("drain 100 B", (drain_base, 0, 0), (measure_drain(node.send_dsn, plan.drain_count),
                                               0, 0))
    node.kill()

    ceiling = Ceiling()
    e2e_base = measure_end_to_end(ceiling.receive, ceiling.send, plan.produce_count, size, window)
    ceiling.stop()
    variants = {"end to end 100 B window 100": [],
                "end to end, --hard-sync": ["--hard-sync"],
                "end to end, archive on": ["--archive-dir", str(directory / "archive")]}
    for scenario, args in variants.items():
        node = start_pzq(directory, scenario.replace(" ", "_").replace(",", ""), *args)
        record(scenario, e2e_base, measure_end_to_end(node.receive_dsn, node.send_dsn,
                                                      plan.produce_count, size, window))
        node.kill()

    ceiling = Ceiling()
    produce_base = measure_produce(ceiling.receive, plan.produce_count, size, window)
    ceiling.stop()
    node = start_pzq(directory, "produce-hard-sync", "--hard-sync")
    record("produce 100 B window 100, --hard-sync", produce_base,
           measure_produce(node.receive_dsn, plan.produce_count, size, window))
    node.kill()
    figures.append(_slow_consumer(directory, plan))
    figures.extend(_replicated(directory, plan, produce_base))
    figures.extend(_backlog_scaling(directory, plan, produce_base, drain_base))
    return figures


SLOW_WORK_S = 0.003
SLOW_ACK_TIMEOUT_US = 1_000_000


def _slow_consumer(directory: Path, plan: Plan) -> Figure:
    """A consumer taking 3 ms per message while a producer runs far ahead of it, with a
    1 s ack timeout: every delivery beyond one per message is a duplicate."""
    node = start_pzq(directory, "slow-consumer", "--ack-timeout", str(SLOW_ACK_TIMEOUT_US),
                     "--reaper-frequency", str(SLOW_ACK_TIMEOUT_US // 10))
    answers = _run([(slow_consume_load, ([node.send_dsn], plan.slow_count, SLOW_WORK_S)),
                    (produce_load, (node.receive_dsn, plan.slow_count, 100, 100))])
    stats = node.stats()
    node.kill()
    consumer = next(a for a in answers if a["role"] == "consumer")
    latencies = consumer["latencies_ns"]
    return Figure(f"slow consumer ({SLOW_WORK_S * 1000:.0f} ms a message)", "pzq",
                  consumer["count"] / max(consumer["seconds"], 1e-9),
                  _percentile(latencies, .5), _percentile(latencies, .99),
                  extra={"deliveries_per_message": round(stats["delivered"] / plan.slow_count, 3),
                         "expired": stats["expired"]})


def _replicated(directory: Path, plan: Plan, base: tuple[float, float, float]) -> list[Figure]:
    endpoints = [f"ipc://{directory}/bench{i}.cluster" for i in range(2)]
    nodes = [start_pzq(directory, f"replica{i}", "--broadcast-dsn", endpoints[i], "--nodes",
                       endpoints[1 - i], "--replicas", "1", "--timeout_replication", "1000000")
             for i in range(2)]
    for node in nodes:
        wait_until(lambda node=node: node.stats()["peers"][0]["state"] == "up", 20,
                   message="both nodes seeing each other")
    rate, p50, p99 = measure_produce(nodes[0].receive_dsn, plan.produce_count, 100, 100)
    failures = nodes[0].stats()["replication_failures"]
    for node in nodes:
        node.kill()
    return [Figure("produce 100 B window 100, --replicas 1", "pzq", rate, p50, p99,
                   ratio=_ratio(rate, base[0]), extra={"replication_failed": failures})]


def _backlog_scaling(directory: Path, plan: Plan, produce_base: tuple[float, float, float],
                     drain_base: float) -> list[Figure]:
    figures = []
    for backlog in plan.backlogs:
        node = start_pzq(directory, f"backlog-{backlog}")
        if backlog:
            fill(node, backlog, 100)
        rate, p50, p99 = measure_produce(node.receive_dsn, plan.produce_count, 100, 100)
        drain = measure_drain(node.send_dsn, plan.drain_count)
        memory = rss_mb(node)
        node.kill()
        figures.append(Figure(f"backlog {backlog}: produce", "pzq", rate, p50, p99, memory,
                              ratio=_ratio(rate, produce_base[0])))
        figures.append(Figure(f"backlog {backlog}: drain", "pzq", drain, rss_mb=memory,
                              ratio=_ratio(drain, drain_base)))
    return figures


def print_table(figures: list[Figure]) -> None:
    print(f"{'scenario':<44} {'target':<8} {'msg/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'RSS MB':>7} {'ratio':>6}")
    for figure in figures:
        print(f"{figure.scenario:<44} {figure.target:<8} {figure.rate:>10.0f} "
              f"{figure.p50_ms:>8.2f} {figure.p99_ms:>8.2f} "
              f"{figure.rss_mb or 0:>7.0f} {'' if figure.ratio is None else figure.ratio:>6}")
    for figure in figures:
        if "deliveries_per_message" in figure.extra:
            print(f"{figure.scenario}: {figure.extra['deliveries_per_message']} deliveries "
                  f"per message, {figure.extra['expired']} expired")


def matplotlib_installed() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw_chart(figures: list[Figure], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rated = [figure for figure in figures if figure.ratio is not None]
    chart, axes = plt.subplots(figsize=(10, 0.4 * len(rated) + 1.5))
    axes.barh([figure.scenario for figure in rated], [figure.ratio for figure in rated],
              color="#3465a4")
    axes.axvline(1.0, color="#888", linestyle="--")
    axes.invert_yaxis()
    axes.set_xlabel("pzq rate / ceiling rate (same run)")
    axes.set_title("pzq against a store-nothing pyzmq device")
    chart.tight_layout()
    chart.savefig(path, dpi=100)
    plt.close(chart)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ToolParser("pzq-bench", __doc__)
    parser.add_argument("--quick", action="store_true", help="about a minute")
    parser.add_argument("--smoke", action="store_true", help="seconds: only checks it runs")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument("--png", type=Path,
                        help="draw the ratios here (needs matplotlib: pip install 'pzq[bench]')")
    args = parser.parse_args(argv)
    if args.png and not matplotlib_installed():
        parser.error("--png needs matplotlib, which is not installed: "
                     "pip install 'pzq[bench]' (or leave out --png)")
    plan = PLANS["smoke" if args.smoke else "quick" if args.quick else "full"]
    with tempfile.TemporaryDirectory(prefix="pzq-bench-") as directory:
        figures = run_benchmark(plan, Path(directory))
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps([asdict(figure) for figure in figures], indent=2))
    if args.png:
        draw_chart(figures, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
