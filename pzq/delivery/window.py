"""How many deliveries may be unacked at once: a window that keeps each delivery's wait
in the consumers' queues well inside its ack timeout.

A DEALER cannot see its consumers' queues. A delivery waits in socket pipes and
kernel buffers, its ack deadline already running, until the consumer reads it; a
slow consumer handed thousands at once sees them expire and come back as a storm of
duplicates. By Little's law, with consumers acking ``rate`` messages a second, a
window of W unacked deliveries makes each wait about W / rate. So, measured while
the window is what holds deliveries back, the window follows
``rate × ack timeout / 4`` within 1..--prefetch; it only grows while consumers keep
up, and every run of expiries halves it at once. Time comes in as ``now_us``.
"""

from __future__ import annotations

INITIAL = 32  # a first burst small enough for a slow consumer, grown within a round
MIN_PERIOD_US = 5_000  # shortest measurement, so a rate is never one ACK's noise
MAX_PERIOD_US = 250_000


class DeliveryWindow:
    def __init__(self, limit: int, ack_timeout_us: int, now_us: int) -> None:
        self.limit = limit  # --prefetch
        self.size = min(limit, INITIAL)
        self.target_wait_us = max(1, ack_timeout_us // 4)
        self._period_us = min(MAX_PERIOD_US, max(MIN_PERIOD_US, self.target_wait_us // 8))
        self._since_us = now_us
        self._acks = 0
        self._held_back = False  # the window, not the consumers, stopped a delivery

    def room(self, unacked: int) -> int:
        """Deliveries that may go out now."""
        room = self.size - unacked
        if room <= 0:
            self._held_back = True
        return max(0, room)

    def acked(self, count: int) -> None:
        """Consumer answers (ACK or give-back) that ended deliveries."""
        self._acks += count

    def expired(self, count: int) -> None:
        if count:
            self.size = max(1, self.size // 2)

    def update(self, now_us: int) -> None:
        elapsed = now_us - self._since_us
        full_round = self._acks >= 2 * self.size and elapsed >= MIN_PERIOD_US
        if elapsed < self._period_us and not full_round:
            return
        wanted = self._acks * self.target_wait_us // max(1, elapsed)
        if self._held_back:
            self.size = max(1, min(self.limit, wanted))
        elif wanted > self.size:
            self.size = min(self.limit, wanted)
        self._since_us, self._acks, self._held_back = now_us, 0, False
