"""Producer ACKs held until enough peers confirmed their copies, or the deadline.

Every message of a wake's batch goes to the same peers in one REPLICATE per peer;
each peer's REPLICATED confirms the whole batch. A message is ACKed "1" when
``replicas`` peers confirmed it, or "1" + REPLICATION_FAILED at its deadline.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class PendingAck:
    routing_id: bytes
    msg_id: bytes
    deadline: float
    confirmed: int = 0
    done: bool = False
    replicated: bool = False  # done with every copy confirmed (else REPLICATION_FAILED)


@dataclass(frozen=True)
class CopiesSettled:
    """Producer ACKs that waited for copies, now due: every copy confirmed, or the
    deadline passed (an event on the node's hub, for the producers' endpoint)."""

    acks: list[PendingAck]


@dataclass
class SentBatch:
    endpoint: str
    acks: list[PendingAck] = field(default_factory=list)


class ReplicationTracker:
    def __init__(self, replicas: int, timeout_replication_s: float) -> None:
        self.replicas = replicas
        self.timeout_replication_s = timeout_replication_s
        self.failures = 0
        self._next_batch_id = 0
        self._batches: dict[int, SentBatch] = {}
        self._by_deadline: deque[PendingAck] = deque()
        self.lag: dict[str, int] = {}  # messages sent to a peer and not yet confirmed

    def track(self, producers: list[tuple[bytes, bytes]], endpoints: list[str],
              now: float) -> dict[str, int]:
        """Hold the ACKs of one stored batch; returns a batch id per peer to send to."""
        acks = [PendingAck(routing_id, msg_id, now + self.timeout_replication_s)
                for routing_id, msg_id in producers]
        self._by_deadline.extend(acks)
        batch_ids = {}
        for endpoint in endpoints:
            batch_id = self._next_batch_id
            self._next_batch_id += 1
            self._batches[batch_id] = SentBatch(endpoint, acks)
            self.lag[endpoint] = self.lag.get(endpoint, 0) + len(acks)
            batch_ids[endpoint] = batch_id
        return batch_ids

    def confirm(self, batch_id: int, endpoint: str) -> list[PendingAck]:
        """A peer stored a batch; returns the ACKs that now have all their copies."""
        sent = self._batches.get(batch_id)
        if sent is None or sent.endpoint != endpoint:
            return []
        del self._batches[batch_id]
        self.lag[endpoint] -= len(sent.acks)
        complete = []
        for ack in sent.acks:
            ack.confirmed += 1
            if not ack.done and ack.confirmed >= self.replicas:
                ack.done = ack.replicated = True
                complete.append(ack)
        return complete

    def expire(self, now: float) -> list[PendingAck]:
        """ACKs whose deadline passed without enough copies (REPLICATION_FAILED)."""
        failed = []
        while self._by_deadline and (self._by_deadline[0].done
                                     or self._by_deadline[0].deadline <= now):
            ack = self._by_deadline.popleft()
            if not ack.done:
                ack.done = True
                failed.append(ack)
        self.failures += len(failed)
        if not self._by_deadline:
            self._forget_unconfirmed_batches()
        return failed

    def fail_all(self) -> list[PendingAck]:
        """Every ACK still waiting, as if its deadline had passed (the node stops)."""
        return self.expire(float("inf"))

    def _forget_unconfirmed_batches(self) -> None:
        """Confirmations that never came are of no use once every ACK is sent."""
        self._batches.clear()
        self.lag = {endpoint: 0 for endpoint in self.lag}

    def next_deadline(self) -> float | None:
        for ack in self._by_deadline:
            if not ack.done:
                return ack.deadline
        return None
