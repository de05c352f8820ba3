"""Load for a partition scenario: producers, consumers that ack, and a STATS sampler.

Every message's body is its producer msg id, so a delivery names the message and
the ACK the producer got for it. ``Tally`` keeps what happened, thread-safe:
what was sent, how each was ACKed, and every delivery with its time and node.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from pzq.client import Consumer, Producer

PRODUCER_WINDOW = 10
SEND_TIMEOUT = 2.0  # a full window this long: the node is gone, start a new producer
FLUSH_TIMEOUT = 5.0
SAMPLE_INTERVAL = 0.2


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: set[bytes] = field(default_factory=set)
    acked_ok: set[bytes] = field(default_factory=set)  # "1" without REPLICATION_FAILED
    acked_replication_failed: set[bytes] = field(default_factory=set)
    refused: set[bytes] = field(default_factory=set)  # "0"
    deliveries: defaultdict[bytes, list[tuple[float, int]]] = field(
        default_factory=lambda: defaultdict(list))  # body -> (monotonic time, node)

    def record_sent(self, body: bytes) -> None:
        with self.lock:
            self.sent.add(body)

    def record_acks(self, acks: list[Any]) -> None:
        with self.lock:
            for ack in acks:
                if not ack.ok:
                    self.refused.add(ack.msg_id)
                elif ack.replication_failed:
                    self.acked_replication_failed.add(ack.msg_id)
                else:
                    self.acked_ok.add(ack.msg_id)

    def record_delivery(self, body: bytes, node: int) -> None:
        with self.lock:
            self.deliveries[body].append((time.monotonic(), node))

    def all_acked_consumed(self) -> bool:
        with self.lock:
            acked = self.acked_ok | self.acked_replication_failed
            return all(body in self.deliveries for body in acked)

    def deliveries_since(self, moment: float) -> int:
        with self.lock:
            return sum(1 for times in self.deliveries.values() for t, _ in times if t > moment)


class Worker(threading.Thread):
    """A thread with its own ZeroMQ context that runs until ``stop``."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        context = zmq.Context()
        try:
            self.work(context)
        except BaseException as exc:  # reported by the scenario, not lost in a thread
            self.error = exc
        finally:
            context.destroy(linger=0)

    def work(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        raise NotImplementedError

    def stop(self, timeout: float = 15.0) -> None:
        self.stopping.set()
        self.join(timeout)


class ProducerLoop(Worker):
    """One producer at a window of 10, as fast as its ACKs come; a new one when the
    node stops answering (killed), so producing goes on once it is back."""

    def __init__(self, endpoint: str, tally: Tally) -> None:
        super().__init__(f"producer {endpoint}")
        self.endpoint = endpoint
        self.tally = tally
        self.restarts = 0

    def work(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        while not self.stopping.is_set():
            with Producer(self.endpoint, window=PRODUCER_WINDOW, context=context) as producer:
                if self._produce(producer):
                    self._flush(producer)
                else:
                    self.tally.record_acks(producer.acks())
                    self.restarts += 1

    def _produce(self, producer: Producer) -> bool:
        """Send until told to stop (True) or until the node stops answering (False)."""
        while not self.stopping.is_set():
            body = producer.next_msg_id()
            try:
                producer.send([body], msg_id=body, timeout=SEND_TIMEOUT)
            except TimeoutError:
                return False
            self.tally.record_sent(body)
            self.tally.record_acks(producer.acks())
        return True

    def _flush(self, producer: Producer) -> None:
        try:
            self.tally.record_acks(producer.flush(FLUSH_TIMEOUT))
        except TimeoutError:
            self.tally.record_acks(producer.acks())


class ConsumerLoop(Worker):
    """Consumes from one node and acks every delivery at once."""

    def __init__(self, endpoint: str, node: int, tally: Tally) -> None:
        super().__init__(f"consumer {endpoint}")
        self.endpoint = endpoint
        self.node = node
        self.tally = tally

    def work(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        with Consumer(self.endpoint, context=context) as consumer:
            while not self.stopping.is_set():
                message = consumer.receive(0.1)
                if message is not None:
                    self.tally.record_delivery(message.parts[0], self.node)
                    message.ack()


@dataclass
class Negative:
    node: int
    figure: str
    value: float


class StatsSampler(Worker):
    """Reads STATS of every running node now and then; keeps each node's latest
    figures and every figure ever seen below zero."""

    def __init__(self, read: Callable[[int], dict[str, Any] | None], nodes: int) -> None:
        super().__init__("stats sampler")
        self.read = read
        self.nodes = nodes
        self.latest: dict[int, dict[str, Any]] = {}
        self.negatives: list[Negative] = []

    def work(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        while not self.stopping.wait(SAMPLE_INTERVAL):
            self.sample()

    def sample(self) -> None:
        for node in range(self.nodes):
            figures = self.read(node)
            if figures is None:
                continue
            self.latest[node] = figures
            for name, value in numeric_leaves(figures):
                if value < 0:
                    self.negatives.append(Negative(node, name, value))


def numeric_leaves(value: Any, path: str = "") -> list[tuple[str, float]]:
    """(dotted path, number) for every number in a STATS answer; peers by endpoint."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [(path, value)]
    if isinstance(value, dict):
        return [leaf for key, item in value.items()
                for leaf in numeric_leaves(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value)
                for leaf in numeric_leaves(item, f"{path}[{_label(item, index)}]")]
    return []


def _label(item: Any, index: int) -> str:
    return str(item.get("endpoint", index)) if isinstance(item, dict) else str(index)
