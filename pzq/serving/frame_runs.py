"""Runs of first deliveries in --send-dsn's frames (the original pzq's), one ZeroMQ
message a delivery, as the pool on --send-dsn and consumers on --consume-dsn speaking
protocol 1 take them: a run's frames made and sent by map, a few calls whatever its
length, with the work over its frames done in C.

Only a message's first frame can be refused (zmq.Again: a full pipe; EHOSTUNREACH: a
consumer gone). The frames are counted as they go, so a refusal leaves the deliveries
before it sent whole, and nothing of it or those after it sent.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from functools import lru_cache
from itertools import accumulate, chain, repeat
from operator import add, itemgetter, sub

import zmq

from pzq.protocol.frame_groups import LENGTH, read_group
from pzq.protocol.message_keys import message_keys
from pzq.serving.holding import ServedConsumer
from pzq.store import record
from pzq.zmqio import MORE_NOBLOCK, NOBLOCK, Socket, send_compiled

Frames = tuple[bytes, ...]
ONE_PART_AT = 2 * LENGTH.size  # a group of one part: its count, its length, the part
PART_OF = itemgetter(slice(ONE_PART_AT, None))


def delivery_frames_of_run(node_id: bytes, seqs: list[int], values: list[bytes],
                           sent_us: int, ack_timeout_us: int) -> list[Frames]:
    """Each record's delivery frames with no headers (pzq.delivery.framing's, the
    original's layout): ``[key][sent µs][ack timeout µs][empty][part…]``."""
    keys = message_keys(node_id, seqs)
    groups = record.part_groups(values)
    sent, timeout = b"%d" % sent_us, b"%d" % ack_timeout_us
    parts = _single_parts(groups)
    if parts is not None:  # (mostly: a message of one part)
        return list(zip(keys, repeat(sent), repeat(timeout), repeat(b""), parts))
    return [(key, sent, timeout, b"", *read_group(group, 0)[0])
            for key, group in zip(keys, groups, strict=True)]


def _single_parts(groups: list[bytes]) -> list[bytes] | None:
    """The part of each group when every group holds exactly one; None otherwise."""
    unpack = LENGTH.unpack_from
    if set(map(unpack, groups, repeat(0))) != {(1,)}:
        return None
    lengths = list(map(unpack, groups, repeat(LENGTH.size)))
    if lengths != list(zip(map(sub, map(len, groups), repeat(ONE_PART_AT)))):
        return None  # (a truncated record: read one at a time, to say so)
    return list(map(PART_OF, groups))


@lru_cache(maxsize=64)
def _flags(count: int) -> tuple[int, ...]:
    """Each frame's send flags for a message of ``count`` frames."""
    return (MORE_NOBLOCK,) * (count - 1) + (NOBLOCK,)


def send_deliveries(socket: Socket, heads: Iterable[Frames], deliveries: list[Frames]
                    ) -> tuple[int, zmq.ZMQError | None]:
    """Each delivery after its head (a routing id, a consumer's fixed frames), one
    message each; returns how many went whole, and the error that refused the next
    (None: all went)."""
    messages = list(map(add, heads, deliveries))
    sent: list[object] = []
    try:
        sent.extend(map(send_compiled, repeat(socket), chain.from_iterable(messages),
                        chain.from_iterable(map(_flags, map(len, messages)))))
    except zmq.ZMQError as exc:  # (on a message's first frame: nothing of it went)
        return bisect_right(list(accumulate(map(len, messages))), len(sent)), exc
    return len(messages), None


def round_robin_turns(candidates: list[ServedConsumer], turn: int, limit: int
                      ) -> list[ServedConsumer]:
    """Who takes each of up to ``limit`` deliveries, in turn from ``turn`` among those
    with credit, each while its credit lasts: as one delivery at a time goes."""
    ring = candidates[turn:] + candidates[:turn]
    rooms = {consumer: consumer.window - consumer.held_count for consumer in ring
             if not consumer.unreachable and consumer.held_count < consumer.window}
    active = [consumer for consumer in ring if consumer in rooms]
    order: list[ServedConsumer] = []
    while active and len(order) < limit:
        left = limit - len(order)
        rounds = min(min(map(rooms.__getitem__, active)), -(-left // len(active)))
        order += active * rounds
        for consumer in active:
            rooms[consumer] -= rounds
        active = [consumer for consumer in active if rooms[consumer]]
    return order[:limit]
