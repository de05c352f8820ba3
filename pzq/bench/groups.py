"""Load generators and measurements for topics and consumer groups: produce spread over
topics, drains by several groups of one topic, and the consume endpoint end to end,
each against its --send-dsn or one-topic baseline in the same run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from pzq.bench.cpu import cpu_seconds
from pzq.bench.load import NS, SILENCE_MS, _arrivals, produce_load
from pzq.bench.measure import percentile, run_workers
from pzq.bench.nodes import NodeProcess
from pzq.client import request_monitor
from pzq.protocol import consume as consume_wire
from pzq.zmqio import send_frames

KEY_AT = 3  # DELIVER | topic | group | key ...
MAX_KEYS = 10_000  # in one ACK


def topic_produce_load(dsn: str, count: int, size: int, window: int, topics: int,
                       results: Any) -> None:
    """produce_load with each message to one of ``topics`` topics in turn (the argument
    order the group scenarios spawn it with)."""
    produce_load(dsn, count, size, window, results, topics)


def group_consume_load(dsn: str, topic: str, group: str, window: int, count: int,
                       from_connect: bool, ack_arrivals: bool, protocol: int,
                       results: Any) -> None:
    """CONSUME one group, ACK every delivery: one ACK message each, as a plain consumer
    does, or with ``ack_arrivals`` one for all that one read found (the protocol's
    ACK of several keys); timed from the connect (a drain) or from the first delivery.
    With ``protocol`` 2 deliveries come in batches and each read's keys go in one
    ACK frame."""
    cpu_started = time.process_time()  # not the process's start (imports)
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.SNDHWM, 0)  # ACKs queue while the node is busy, never refused
    socket.connect(dsn)
    started = time.perf_counter() if from_connect else None
    send_frames(socket, [b"CONSUME", topic.encode(), group.encode(), b"%d" % window,
                         *([b"PROTOCOL:%d" % protocol] if protocol > 1 else [])])
    latencies: list[int] = []
    received = 0
    last = time.perf_counter()
    while received < count:
        arrived = _arrivals(socket, SILENCE_MS)
        if arrived is None:
            break
        keys = [b"ACK"]
        bodies: list[bytes] = []
        for frames in arrived:
            if frames[0] == consume_wire.BATCH:
                entries = consume_wire.decode_batch(frames).entries
                keys += [key for key, _, _ in entries]
                bodies += [parts[0] for _, _, parts in entries]
            elif frames[0] == consume_wire.DELIVER:
                if ack_arrivals:
                    keys.append(frames[KEY_AT])
                else:
                    send_frames(socket, [b"ACK", frames[KEY_AT]])
                bodies.append(frames[frames.index(b"", KEY_AT + 3) + 1])
            # else: the node's heartbeats, not part of the drain's time
        if not bodies:
            continue
        started = started or time.perf_counter()
        received += len(bodies)
        now_ns = time.time_ns()
        latencies += [now_ns - NS.unpack_from(body)[0] for body in bodies]
        for at in range(1, len(keys), MAX_KEYS):
            chunk = keys[at:at + MAX_KEYS]
            send_frames(socket, [b"ACK", b" ".join(chunk)] if protocol > 1
                        else [b"ACK", *chunk])
        last = time.perf_counter()
    results.put({"role": "consumer", "group": group, "count": received,
                 "seconds": last - (started or last),
                 "cpu_seconds": time.process_time() - cpu_started,
                 "latencies_ns": latencies[::max(1, len(latencies) // 20_000)]})
    context.destroy(linger=0)


def groups_only(target: NodeProcess, groups: list[str], options: str = "") -> None:
    """Topic t0 read by these groups only (not by --send-dsn), each declared with
    ``options`` (``ack_timeout=1s`` ...)."""
    for command in ("DECLARE TOPIC t0",
                    *(f"DECLARE GROUP t0 {group} {options}".rstrip() for group in groups),
                    "REMOVE GROUP t0 default"):
        answer = request_monitor(target.monitor_dsn, command, timeout=30)
        if answer.startswith(b"ERROR"):
            raise RuntimeError(f"{command}: {answer.decode(errors='replace')}")


def measure_topic_produce(dsn: str, count: int, window: int, topics: int) -> float:
    (answer,) = run_workers([(topic_produce_load, (dsn, count, 100, window, topics))])
    rate: float = answer["count"] / answer["seconds"]
    return rate


@dataclass
class Drains:
    rates: dict[str, float]  # each group's messages per second
    node_cpu_us: float  # the node's CPU time per delivered (and acked) message
    consumer_cpu_us: float  # a consumer's CPU time per message it took


def measure_group_drains(dsn: str, topic: str, groups: list[str], count: int,
                         window: int, node_pid: int, protocol: int = 1) -> Drains:
    """Every group drains the topic at once: each group's rate, and the CPU time the
    node and the consumers spent per message."""
    node_cpu = cpu_seconds(node_pid)
    answers = run_workers([(group_consume_load, (dsn, topic, group, window, count, True,
                                                 False, protocol))
                           for group in groups])
    node_cpu = cpu_seconds(node_pid) - node_cpu
    delivered = sum(answer["count"] for answer in answers)
    return Drains({answer["group"]: answer["count"] / max(answer["seconds"], 1e-9)
                   for answer in answers},
                  node_cpu / max(delivered, 1) * 1e6,
                  sum(answer["cpu_seconds"] for answer in answers) / max(delivered, 1) * 1e6)



def measure_group_end_to_end(receive: str, consume: str, count: int, window: int,
                             credits: int, ack_arrivals: bool = False, protocol: int = 1
                             ) -> tuple[float, float, float]:
    answers = run_workers([
        (group_consume_load, (consume, "t0", "e2e", credits, count, False, ack_arrivals,
                              protocol)),
        (topic_produce_load, (receive, count, 100, window, 1))])
    consumer = next(a for a in answers if a["role"] == "consumer")
    producer = next(a for a in answers if a["role"] == "producer")
    seconds = max(consumer["seconds"], producer["seconds"])
    latencies = consumer["latencies_ns"]
    return consumer["count"] / seconds, percentile(latencies, .5), percentile(latencies, .99)


@dataclass
class Row:
    """One scenario over the repeats: rates, latencies and ratios to the baseline of
    the same repeat; the figures are the medians, with the range of the repeats."""

    scenario: str
    target: str = ""
    wanted_ratio: float | None = None  # the rate ratio must be at least this
    wanted_p99_ratio: float | None = None  # the p99 ratio at most this
    rates: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    p50s: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)
    p99_ratios: list[float] = field(default_factory=list)
    node_cpu_us: list[float] = field(default_factory=list)  # per message
    consumer_cpu_us: list[float] = field(default_factory=list)

    def cpu(self, node_us: float, consumer_us: float) -> None:
        self.node_cpu_us.append(node_us)
        self.consumer_cpu_us.append(consumer_us)

    def add(self, rate: float, ratio: float | None = None, p50: float | None = None,
            p99: float | None = None, p99_ratio: float | None = None) -> None:
        self.rates.append(rate)
        for values, value in ((self.ratios, ratio), (self.p50s, p50), (self.p99s, p99),
                              (self.p99_ratios, p99_ratio)):
            if value is not None:
                values.append(value)

    def met(self) -> bool | None:
        """Whether the medians meet the target (None: no target)."""
        if self.wanted_ratio is None or not self.ratios:
            return None
        met = statistics.median(self.ratios) >= self.wanted_ratio
        if self.wanted_p99_ratio is not None and self.p99_ratios:
            met = met and statistics.median(self.p99_ratios) <= self.wanted_p99_ratio
        return met

    def summary(self) -> dict[str, object]:
        found: dict[str, object] = {"scenario": self.scenario, "target": self.target,
                                    "met": self.met()}
        for name, values in (("rate", self.rates), ("ratio", self.ratios),
                             ("p50_ms", self.p50s), ("p99_ms", self.p99s),
                             ("p99_ratio", self.p99_ratios),
                             ("node_cpu_us", self.node_cpu_us),
                             ("consumer_cpu_us", self.consumer_cpu_us)):
            if values:
                found[name] = statistics.median(values)
                found[f"{name}_range"] = [min(values), max(values)]
        return found


def print_rows(rows: list[Row]) -> None:
    print(f"{'scenario':<48} {'msg/s':>7} {'range':>13} {'p50':>6} {'p99 ms':>7} "
          f"{'ratio':>5} {'range':>11} {'p99 r':>5}  target")
    for row in rows:
        found = row.summary()
        met = {True: "met", False: "NOT met", None: ""}[row.met()]
        print(f"{row.scenario:<48} {found['rate']:>7.0f} "
              f"{_span(found, 'rate', '{:.0f}'):>13} {_value(found, 'p50_ms'):>6} "
              f"{_value(found, 'p99_ms'):>7} {_value(found, 'ratio'):>5} "
              f"{_span(found, 'ratio', '{:.2f}'):>11} {_value(found, 'p99_ratio'):>5}  "
              f"{row.target} {met}".rstrip())
        if "node_cpu_us" in found:
            print(f"{'':<4}CPU per message: node {found['node_cpu_us']:.1f} µs, consumer "
                  f"{found['consumer_cpu_us']:.1f} µs")


def _value(found: dict[str, object], key: str) -> str:
    value = found.get(key)
    return f"{value:.2f}" if isinstance(value, float) else ""


def _span(found: dict[str, object], key: str, form: str) -> str:
    span = found.get(f"{key}_range")
    if not isinstance(span, list):
        return ""
    return f"{form.format(span[0])}-{form.format(span[1])}"
