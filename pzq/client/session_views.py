"""What a shell tells of its session, the same in a sync client and its asyncio twin
(pzq.aio): read-only properties over ``self._session``, one mixin a kind of client."""

from __future__ import annotations

from collections import deque
from typing import Generic

from pzq.client.sessions.delivered import M
from pzq.client.sessions.group import GroupSession
from pzq.client.sessions.producer import ProducerSession
from pzq.client.sessions.routed_producer import RoutedProducerSession
from pzq.protocol import consume as consume_wire


class ProducerView:
    _session: ProducerSession

    @property
    def window(self) -> int:
        """Most messages sent and not yet ACKed; a send waits for room beyond."""
        return self._session.window

    @property
    def batch(self) -> int:
        """Most messages in one produce batch."""
        return self._session.batch

    @property
    def protocol(self) -> int:
        """2 once the node said it speaks produce batches."""
        return self._session.protocol

    @property
    def outstanding(self) -> int:
        """Messages sent and not yet ACKed."""
        return len(self._session.unanswered)

    @property
    def latencies(self) -> deque[float]:
        """Seconds from send to ACK, in ACK order, the last ``keep_acks``."""
        return self._session.latencies

    def next_msg_id(self) -> bytes:
        """A new message id of this producer's (``send`` takes one when given none)."""
        return self._session.next_msg_id()


class GroupView(Generic[M]):
    _session: GroupSession[M]

    @property
    def subscribe(self) -> consume_wire.Subscribe:
        """What it asked for (protocol 1 once an older node refused protocol 2)."""
        return self._session.subscribe

    @property
    def protocol(self) -> int:
        """What the node's CONSUMING agreed to."""
        return self._session.protocol

    @property
    def errors(self) -> list[str]:
        """ERROR answers to ACK or NACK (and the others), in the order they came."""
        return self._session.errors

    @property
    def malformed(self) -> int:
        """Frames from the node that were nothing it sends (dropped)."""
        return self._session.malformed

    @property
    def arrived(self) -> int:
        """Deliveries decoded already (the rest of a batch), which receive returns
        without waiting."""
        return len(self._session.arrived)


class RoutedProducerView:
    _session: RoutedProducerSession

    @property
    def outstanding(self) -> int:
        """Messages sent and without their final ACK yet."""
        return len(self._session.sent)

    @property
    def moved(self) -> int:
        """Messages sent again to another node after a MOVED."""
        return self._session.moved

    @property
    def resent(self) -> int:
        """Messages sent again to another node after a silence."""
        return self._session.resent

    @property
    def unanswered_at(self) -> dict[str, int]:
        """Receive endpoint -> the messages sent there and not ACKed yet, in the order
        the endpoints were first sent to: where a wait for ACKs waits."""
        found: dict[str, int] = {}
        for sent in self._session.sent.values():
            found[sent.endpoint] = found.get(sent.endpoint, 0) + 1
        return found
