"""Figures the monitor reports, kept as the work happens so answering never scans."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Counters:
    received: int = 0  # producer messages read from the receive socket
    stored: int = 0  # of those, written to the store
    rejected: int = 0  # refused as malformed, too large, forged or forbidden (ACK "0")
    store_failures: int = 0  # refused because the store write failed (ACK "0")
    acks_ok: int = 0  # producer ACKs "1" owed, by outcome
    acks_replication_failed: int = 0  # "1" with REPLICATION_FAILED
    acks_failed: int = 0  # "0": refused, with the reason
    producer_acks_sent: int = 0
    producer_acks_dropped: int = 0  # the producer was gone before its ACK could go
    delivered: int = 0  # deliveries sent, first ones and again
    redelivered: int = 0  # deliveries of a message that had been delivered before
    acked: int = 0  # consumer ACK "1" that removed a message
    late_acks: int = 0  # of those, after the message had left the in-flight table
    nacked: int = 0  # consumer ACK with another status: delivered again
    expired: int = 0  # ack timeout passed: delivered again
    evicted: int = 0  # pushed out of the in-flight table by its size bound
    dead_lettered: int = 0  # moved to the dead letters after --max-deliveries
    ttl_expired: int = 0  # messages expired (TTL, EXPIRES, a topic's max_age): never delivered
    queue_full: int = 0  # refused because --max-messages or --max-bytes was reached
    moved: int = 0  # refused: another node owns the message's partition (MOVED)
    duplicates: int = 0  # repeats of a DEDUP-ID within its window: ACKed, not stored
    bad_consumer_acks: int = 0  # malformed consumer ACK frames
    unknown_acks: int = 0  # well-formed ACKs naming no stored message
    monitor_requests: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
