"""A consumer's answers beyond ACK and NACK (docs/groups.rst, "The consume endpoint"): still at
work on a delivery (WORKING), giving one up for good (REJECT), and the confirmations
of ACKs it asked for (CONFIRM:1), sent once the batch that wrote them is in the store.

Each answer touches only what the consumer holds: a delivery that expired at it and
went to another consumer is that one's now (its credit comes back, nothing more).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from pzq.protocol import consume as consume_wire
from pzq.protocol.message_keys import parse_message_key
from pzq.serving.holding import ServedConsumer
from pzq.store.batch import Participant


def extend(consumer: ServedConsumer, keys: tuple[bytes, ...], now_us: int) -> None:
    """WORKING: each delivery's deadline starts again (JetStream's in-progress)."""
    for key in keys:
        node_id, seq = parse_message_key(key)
        state = consumer.group.state_for(node_id)
        held = consumer.group.key_of(node_id, seq) in consumer.held
        if state is None or not held or not state.extend(seq, now_us):
            consumer.group.counters.unknown_acks += 1


def reject(consumer: ServedConsumer, keys: tuple[bytes, ...]) -> None:
    """REJECT: the consumer gives these up: to the dead letters, never delivered again
    to the group (its credits come back)."""
    deliveries = consumer.group
    for key in keys:
        node_id, seq = parse_message_key(key)
        key_held = deliveries.key_of(node_id, seq)
        consumer.overdue.discard(key_held)
        state = deliveries.state_for(node_id)
        if state is None or key_held not in consumer.held:
            deliveries.counters.unknown_acks += 1
            continue
        consumer.held.discard(key_held)
        state.reject(seq)


Send = Callable[[list[bytes]], None]


class Confirmations(Participant):
    """ACKs to confirm (a consumer said CONFIRM:1), answered ACKED after the batch that
    wrote them; a batch that failed keeps them for the next, which writes its deletes."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self._owed: dict[bytes, list[bytes]] = {}  # routing id -> keys
        self.idle = True  # (Participant) until some are owed

    def owe(self, routing_id: bytes, keys: list[bytes] | tuple[bytes, ...]) -> None:
        self._owed.setdefault(routing_id, []).extend(keys)
        self.idle = False

    def written(self) -> None:
        owed, self._owed = self._owed, {}
        self.idle = True
        for routing_id, keys in owed.items():
            most = consume_wire.MAX_KEYS
            for start in range(0, len(keys), most):
                self.send([routing_id, consume_wire.ACKED, *keys[start:start + most]])


REFUSED_CONNECTIONS = 1000  # connections whose refused ACKs are kept, the newest
REFUSED_KEYS = 10 * consume_wire.MAX_KEYS  # keys kept for one connection at most


class RefusedAcks:
    """ACKs that came on a connection the node did not know (it restarted), kept until
    that connection says CONSUME: they are applied then, before anything is delivered
    to it, however many ACKs it sent before and however its CONSUME was timed."""

    def __init__(self) -> None:
        self._kept: OrderedDict[bytes, list[bytes]] = OrderedDict()

    def keep(self, routing_id: bytes, keys: tuple[bytes, ...]) -> None:
        kept = self._kept.setdefault(routing_id, [])
        kept.extend(keys[:max(0, REFUSED_KEYS - len(kept))])
        self._kept.move_to_end(routing_id)
        while len(self._kept) > REFUSED_CONNECTIONS:
            self._kept.popitem(last=False)  # a connection that never joined

    def take(self, routing_id: bytes) -> list[bytes]:
        return self._kept.pop(routing_id, [])
