"""A group's delivery settings: the node's options for ``default`` (pzq.node.config),
a named group's own where it declared them (pzq.delivery.groups)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeliverySettings:
    ack_timeout_us: int
    inflight_size: int  # bytes of messages tracked in flight
    max_deliveries: int = 0  # 0: deliver again for ever
    with_headers: bool = False  # --delivery-headers
    # waits before a delivery whose deadline passed goes again: the n-th entry after
    # the n-th delivery, the last one for every later delivery (none: at once)
    backoff_us: tuple[int, ...] = ()

    def backoff_after(self, deliveries: int) -> int:
        if not self.backoff_us:
            return 0
        return self.backoff_us[min(deliveries, len(self.backoff_us)) - 1]
