"""Consumer ACKs from --send-dsn, routed to the delivery state of the key's node.

A key names its origin node: this node's own messages, or a down node's whose
delivery this node took over. ACK "1" archives the message (when the archive is
on) and removes it; any other status gives it back. Malformed or unknown ACKs are
counted and ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from pzq.counters import Counters
from pzq.delivery.state import DeliveryState
from pzq.delivery.window import DeliveryWindow
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.node.archiving import Archiving
from pzq.node.rates import LatencyWindow
from pzq.protocol import frames
from pzq.protocol.message_keys import parse_message_key
from pzq.store.store import Batch
from pzq.store.topics import DEFAULT_GROUP
from pzq.zmqio import Socket, drain

log = get_logger("pzq.acks")

StateFor = Callable[[bytes], DeliveryState | None]  # node id -> its delivery state
# origin, seq, group, final: the group is done with it here (acked, or given up on
# --consume-dsn); final: no group holds it, drop the copies (NodeState.removed)
Removed = Callable[[bytes, int, str, bool], None]
FinalAck = Callable[[DeliveryState, int], bool]  # whether the ACK deletes the message


class ConsumerAcks:
    def __init__(self, socket: Socket, state_for: StateFor, removed: Removed,
                 archiving: Archiving | None, window: DeliveryWindow,
                 latency: LatencyWindow, counters: Counters, batch_size: int,
                 final_ack: FinalAck = lambda state, seq: True) -> None:
        self.socket = socket
        self.final_ack = final_ack  # false while other consumer groups hold the message
        self.state_for = state_for
        self.removed = removed
        self.archiving = archiving
        self.window = window
        self.latency = latency
        self.counters = counters
        self.batch_size = batch_size

    def take(self, batch: Batch, now_us: int, mono: float) -> None:
        answered = self.counters.acked + self.counters.nacked
        for raw in drain(self.socket, self.batch_size):
            try:
                key, ok = frames.decode_consumer_ack(raw)
                node_id, seq = parse_message_key(key)
            except DecodeError as exc:
                self.counters.bad_consumer_acks += 1
                log.debug("consumer_ack_malformed", reason=str(exc))
                continue
            if not self._apply(batch, node_id, key, seq, ok, now_us, mono):
                log.debug("consumer_ack_unknown", key=key.decode(), status=ok)
        self.window.acked(self.counters.acked + self.counters.nacked - answered)

    def _apply(self, batch: Batch, node_id: bytes, key: bytes, seq: int, ok: bool,
               now_us: int, mono: float) -> bool:
        state = self.state_for(node_id)
        if state is None:
            self.counters.unknown_acks += 1
            return False
        if not ok:
            return state.nack(seq)
        final = self.final_ack(state, seq)
        if final and self.archiving is not None \
                and not self.archiving.acked(state, batch, key, seq, now_us):
            return True  # not archived, so not removed: it will be delivered again
        entry = state.ack(batch, seq)
        if entry is None:
            return False
        # Copies serve a takeover of every group: they go once every group is done,
        # and are marked done for this one before that.
        self.removed(node_id, seq, DEFAULT_GROUP, final)
        if entry.sent_us:
            self.latency.add(mono, (now_us - entry.sent_us) / 1e6)
        return True
