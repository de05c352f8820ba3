"""Keyed load on a partitioned topic: a routing producer and a routing group consumer.

Each message's body is ``key:seq`` (its key and its number among that key's messages),
so a delivery names the message and its place in its key's order. ``KeyedTally`` keeps,
thread-safe, what was sent (and when), how each was ACKed and by which node, and every
delivery in the order the consumer saw them.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from pzq.client import RoutedGroupConsumer, RoutedProducer
from pzq.client.consumer import Message
from tests.support.partition_load import FLUSH_TIMEOUT, Worker

SEND_TIMEOUT = 0.5  # an owner's window full this long: let the producer resend elsewhere


def body_of(key: bytes, seq: int) -> bytes:
    return b"%s:%d" % (key, seq)


def parse(body: bytes) -> tuple[bytes, int]:
    key, _, seq = body.rpartition(b":")
    return key, int(seq)


@dataclass
class KeyedTally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent_at: dict[bytes, float] = field(default_factory=dict)  # body -> first send
    acked_ok: set[bytes] = field(default_factory=set)  # "1" without REPLICATION_FAILED
    acked_replication_failed: set[bytes] = field(default_factory=set)
    refused: set[bytes] = field(default_factory=set)
    sent_to: dict[bytes, list[tuple[float, str]]] = field(  # body -> (when, receive endpoint)
        default_factory=lambda: defaultdict(list))
    deliveries: list[tuple[float, bytes, str]] = field(default_factory=list)  # consume ep.

    def record_sent(self, body: bytes) -> None:
        with self.lock:
            self.sent_at.setdefault(body, time.monotonic())

    def record_ack(self, body: bytes, ok: bool, replication_failed: bool,
                   sent_to: list[tuple[float, str]]) -> None:
        with self.lock:
            self.sent_to[body] += sent_to
            if not ok:
                self.refused.add(body)
                return
            (self.acked_replication_failed if replication_failed else self.acked_ok).add(body)

    def record_deliveries(self, bodies: list[tuple[bytes, str]]) -> None:
        with self.lock:
            now = time.monotonic()
            self.deliveries += [(now, body, node) for body, node in bodies]

    def consumed(self) -> set[bytes]:
        with self.lock:
            return {body for _, body, _ in self.deliveries}

    def all_acked_consumed(self) -> bool:
        consumed = self.consumed()
        with self.lock:
            return (self.acked_ok | self.acked_replication_failed) <= consumed


class TrackingProducer(RoutedProducer):
    """A RoutedProducer that remembers every node each message went to, and when (the
    ACK does not say which node answered)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: dict[bytes, bytes] = {}  # msg id -> body
        self.sent_to: defaultdict[bytes, list[tuple[float, str]]] = defaultdict(list)

    def _carry(self, msg_id: bytes, endpoint: str, parts: list[bytes],
               headers: Sequence[bytes], timeout: float) -> None:
        self.bodies[msg_id] = parts[0]
        self.sent_to[msg_id].append((time.monotonic(), endpoint))
        super()._carry(msg_id, endpoint, parts, headers, timeout)


class KeyedProducerLoop(Worker):
    """Sends the keys' messages in turn, as fast as the owners' windows allow."""

    def __init__(self, monitors: list[str], topic: str, keys: list[bytes], window: int,
                 tally: KeyedTally) -> None:
        super().__init__("keyed producer")
        self.monitors, self.topic, self.keys, self.window = monitors, topic, keys, window
        self.tally = tally
        self.moved = self.resent = 0
        self.unacked = 0  # without an ACK when the producer stopped

    def work(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        with TrackingProducer(self.monitors, self.topic, window=self.window,
                              context=context) as producer:
            seq = 0
            while not self.stopping.is_set():
                for key in self.keys:
                    self._send(producer, key, body_of(key, seq))
                seq += 1
            try:
                self._record(producer, producer.flush(FLUSH_TIMEOUT))
            except TimeoutError:
                self._record(producer, producer.acks())
            self.moved, self.resent, self.unacked = (producer.moved, producer.resent,
                                                     producer.outstanding)

    def _send(self, producer: TrackingProducer, key: bytes, body: bytes) -> None:
        """Send, again while the owner's window stays full (each key's order is kept)."""
        self.tally.record_sent(body)
        while not self.stopping.is_set():
            try:
                producer.send([body], key=key, timeout=SEND_TIMEOUT)
            except TimeoutError:
                self._record(producer, producer.acks(SEND_TIMEOUT))
                continue
            self._record(producer, producer.acks())
            return

    def _record(self, producer: TrackingProducer, acks: list[Any]) -> None:
        for ack in acks:
            body = producer.bodies.pop(ack.msg_id)
            self.tally.record_ack(body, ack.ok, ack.replication_failed,
                                  producer.sent_to.pop(ack.msg_id))


class KeyedConsumerLoop(Worker):
    """Reads the group on every node and acks each delivery at once."""

    def __init__(self, monitors: list[str], topic: str, group: str, window: int,
                 tally: KeyedTally) -> None:
        super().__init__("routed group consumer")
        self.monitors, self.topic, self.group, self.window = monitors, topic, group, window
        self.tally = tally
        self.ready = threading.Event()

    def work(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        with RoutedGroupConsumer(self.monitors, self.topic, self.group, window=self.window,
                                 context=context) as consumer:
            endpoints = {id(one): endpoint for endpoint, one in consumer.consumers.items()}
            self.ready.set()
            while not self.stopping.is_set():
                messages = consumer.receive_many(100, 0.1)
                self.tally.record_deliveries([(m.parts[0], _node(m, endpoints, consumer))
                                              for m in messages])
                consumer.ack_many(messages)


def _node(message: Message, endpoints: dict[int, str], consumer: RoutedGroupConsumer) -> str:
    """The consume endpoint a delivery came from (a node joined later is looked up)."""
    found = endpoints.get(id(message._consumer))
    if found is None:
        endpoints.update({id(one): ep for ep, one in consumer.consumers.items()})
        found = endpoints[id(message._consumer)]
    return found


def first_seen(deliveries: list[tuple[float, bytes, str]]) -> list[bytes]:
    """Each message once, where the consumer first saw it."""
    seen: dict[bytes, None] = {}
    for _, body, _ in deliveries:
        seen.setdefault(body)
    return list(seen)


def inversions(bodies: list[bytes], stream: dict[bytes, str] | None = None) -> list[str]:
    """Messages first seen after a later message of their key (of the same stream, when
    ``stream`` maps each message to one): ``key:seq after seq'``."""
    highest: dict[tuple[bytes, str], int] = defaultdict(lambda: -1)
    found = []
    for body in bodies:
        key, seq = parse(body)
        where = (key, stream.get(body, "") if stream is not None else "")
        if seq < highest[where]:
            found.append(f"{body.decode()} after {highest[where]} {where[1]}".rstrip())
        highest[where] = max(highest[where], seq)
    return found
