"""A node's topics over a real store, in process: messages of topics and tags stored,
a group's DeliveryState over an area, everything it can deliver taken at once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pzq.counters import Counters
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.protocol.message_keys import parse_message_key
from pzq.store import record
from pzq.store.store import Store
from pzq.store.topics import Topics

SETTINGS = DeliverySettings(ack_timeout_us=1_000_000, inflight_size=1 << 20)


def open_node(path: Path) -> tuple[Store, Topics]:
    store = Store.open(path)
    topics = Topics(store, "default")
    store.register(topics)
    return store, topics


def store_messages(store: Store, topics: Topics, bodies: Sequence[bytes],
                   topic: str = "orders", tag: bytes = b"",
                   tags: Sequence[bytes] | None = None) -> None:
    """``bodies`` in one batch, of ``topic``, each of ``tag`` (or of its own in ``tags``)."""
    batch = store.begin()
    for body, its_tag in zip(bodies, tags or [tag] * len(bodies), strict=True):
        value = record.encode(b"id", (b"TOPIC:" + topic.encode(), b"TAG:" + its_tag),
                              (body,), 1)
        seq = batch.add_message(value)
        topics.note_new(batch, seq, topics.topic(topic, 1), its_tag, len(value))
    store.commit(batch)


def state_for(store: Store, area: Any) -> DeliveryState:
    state = DeliveryState(area, SETTINGS, Counters())
    store.register(state)
    return state


def deliver_all(state: DeliveryState) -> list[int]:
    """The seqs of what the state delivers now (up to 1 000)."""
    keys: list[bytes] = []
    state.deliver(lambda frames: keys.append(frames[0]) or True, 10, 1000)
    return [parse_message_key(key)[1] for key in keys]


def ack_all(store: Store, state: DeliveryState, seqs: list[int]) -> None:
    """An ACK of ``seqs`` in one go, in a batch of its own."""
    batch = store.begin()
    state.ack_all(batch, seqs)
    store.commit(batch)
