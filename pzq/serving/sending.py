"""Deliveries sent to a group's consumers: round robin over those with credit, as
the consumers on --consume-dsn and the pool on --send-dsn both are. A consumer that
speaks protocol 2 gets its deliveries in batches (pzq.serving.batching), filled as far
as its credit goes before the next consumer's turn.

Per message only what must be: the send (after each consumer's fixed frames, built
once) or the batch entry, and who holds it; a run of first deliveries costs a few
calls whatever its length: to consumers taking batches, its entries made in one pass
and each consumer filled to its credit in one step; to the pool and to consumers
taking one message a delivery, its frames made and sent by map
(pzq.serving.frame_runs). Deliveries expire only at a reap, so
when no consumer has one overdue now, none will have during one send.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from itertools import compress, repeat
from operator import is_
from typing import NamedTuple

import zmq

from pzq.delivery.delivering import Outlet
from pzq.delivery.first_runs import ONE_BY_ONE, RunOutlet
from pzq.delivery.framing import delivery_frames
from pzq.delivery.recent import longest
from pzq.delivery.state import DeliveryState
from pzq.protocol import consume as consume_wire
from pzq.protocol.message_keys import MESSAGE_KEY_LENGTH
from pzq.serving.answers import BULK_ACK_KEYS
from pzq.serving.batching import OpenBatch
from pzq.serving.frame_runs import delivery_frames_of_run, round_robin_turns, send_deliveries
from pzq.serving.holding import GroupDelivery, Key, SentKeys, ServedConsumer
from pzq.store import record
from pzq.store.kept_reads import KeptReads
from pzq.zmqio import Socket, send_headed

KEY_STRIDE = MESSAGE_KEY_LENGTH + len(consume_wire.KEY_SEPARATOR)
Send = Callable[[list[bytes]], bool]
Put = Callable[[ServedConsumer, bytes, bytes, int], bool]  # consumer, key, record, deliveries


def _batch_entries(node_id: bytes, seqs: list[int], values: list[bytes]
                   ) -> tuple[list[bytes], bytes | None]:
    """A run's batch entries (no headers), and its keys as one ACK of them names them."""
    return consume_wire.plain_batch_run(node_id, seqs, record.part_groups(values))


def sent_keys(acks: bytes | None, start: int, stop: int, node_id: bytes, seqs: list[int]
              ) -> SentKeys | None:
    """What an ACK of exactly the run's entries ``start`` to ``stop`` (``seqs``, of
    ``node_id``) is, as a consumer's ``sent``: that piece of the run's ``acks``; none
    for a piece too short for the ACK of many keys."""
    if acks is None or stop - start < BULK_ACK_KEYS:
        return None
    return acks[start * KEY_STRIDE:stop * KEY_STRIDE - 1], int(node_id, 16), seqs


class Outlets(NamedTuple):
    """Where one pass's deliveries go: each alone, and runs of first deliveries."""

    each: Outlet
    run: RunOutlet


class Sender:
    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.blocked = False  # no consumer's pipe took a delivery: try again soon
        self.found_unreachable = False  # a send found a consumer gone
        self.batch = OpenBatch(socket)  # protocol 2: a BATCH being filled
        # Runs' entries by their list of seqs (a read's own, the same object for each
        # group that reads the same stretch of an unchanged log), with the node id and
        # the records they were made of; a read of other seqs takes from them what they
        # hold of it (``_entries_made``), for a topic's other groups
        self._runs: KeptReads[tuple[bytes, list[bytes], list[bytes], bytes | None]] = \
            KeptReads()

    def for_pool(self, pool: ServedConsumer) -> Send:
        """To the pool on --send-dsn: the socket picks the consumer, and the window
        bounds what is out, so nothing is kept per delivery (as fast as a bare send)."""
        socket, head = self.socket, pool.head

        def send(frames: list[bytes]) -> bool:
            try:
                send_headed(socket, head, frames)
            except zmq.Again:
                self.blocked = True
                return False
            return True
        return send

    def for_pool_run(self, pool: ServedConsumer, state: DeliveryState, now_us: int
                     ) -> RunOutlet:
        """Runs of first deliveries to the pool, each in one go (none with headers)."""
        if state.with_headers:
            return ONE_BY_ONE
        socket, heads, ack_timeout_us = self.socket, repeat(tuple(pool.head)), \
            state.ack_timeout_us

        def send_run(node_id: bytes, seqs: list[int], values: list[bytes]) -> int:
            sent, error = send_deliveries(socket, heads, delivery_frames_of_run(
                node_id, seqs, values, now_us, ack_timeout_us))
            if isinstance(error, zmq.Again):
                self.blocked = True
            elif error is not None:
                raise error
            return sent
        return send_run

    def for_group(self, deliveries: GroupDelivery, state: DeliveryState,
                  now_us: int) -> Outlets:
        """Outlets for one pass over one of the group's states, in the order of this
        call; ``finish`` after it."""
        candidates = deliveries.next_consumers()
        put = self._putter(state, now_us)
        if deliveries.any_overdue():
            return Outlets(self._avoiding_expired(deliveries, candidates, put,
                                                  deliveries.base_for(state.area.node_id)),
                           ONE_BY_ONE)
        return self._round_robin(deliveries, candidates, put, state, now_us)

    def finish(self) -> None:
        """The pass is over: what is batched goes."""
        self.batch.close()

    def _putter(self, state: DeliveryState, now_us: int) -> Put:
        socket, batch = self.socket, self.batch
        ack_timeout_us, with_headers = state.ack_timeout_us, state.with_headers

        def put(consumer: ServedConsumer, key: bytes, value: bytes, deliveries: int) -> bool:
            """Sent to the consumer, or added to its batch; False: not taken."""
            try:
                if consumer.batches:
                    batch.add(consumer, key, value, deliveries, now_us, ack_timeout_us,
                              with_headers)
                else:
                    batch.close()
                    send_headed(socket, consumer.head, delivery_frames(
                        key, value, deliveries, now_us, ack_timeout_us, with_headers))
            except zmq.Again:
                return False  # its pipe is full
            except zmq.ZMQError as exc:
                self._unreachable(consumer, exc)
                return False
            return True
        return put

    def _round_robin(self, deliveries: GroupDelivery, candidates: list[ServedConsumer],
                     put: Put, state: DeliveryState, now_us: int) -> Outlets:
        """Each delivery to the next consumer with credit; one taking batches is
        filled before the turn moves on. Runs go the same way, in one call each, when
        no delivery carries headers and every consumer takes batches, or none does."""
        count = len(candidates)
        base = deliveries.base_for(state.area.node_id)  # (every key sent here is its own)
        turn = 0

        def send(seq: int, key: bytes, value: bytes, deliveries: int) -> bool:
            nonlocal turn
            for _ in range(count):
                consumer = candidates[turn]
                held = consumer.held_alone  # (the runs it holds: counted, not put in)
                if consumer.unreachable or len(held) + consumer.held_in_runs >= consumer.window \
                        or not put(consumer, key, value, deliveries):
                    turn = turn + 1 if turn + 1 < count else 0
                    continue
                if not consumer.batches:
                    turn = turn + 1 if turn + 1 < count else 0
                held.add(base | seq)
                return True
            self.blocked = True
            return False

        if state.with_headers:
            return Outlets(send, ONE_BY_ONE)
        # (a group of one consumer, the common case: no generator made a pass)
        batches = candidates[0].batches if count == 1 else \
            sum(consumer.batches for consumer in candidates)
        if not batches:
            runs = self._plain_run
        elif batches == count:
            runs = self._batched_run
        else:
            return Outlets(send, ONE_BY_ONE)

        def send_run(node_id: bytes, seqs: list[int], values: list[bytes]) -> int:
            """As ``send`` of each, in turn."""
            nonlocal turn
            taken, turn = runs(deliveries, candidates, turn, state, now_us, node_id, seqs,
                               values)
            return taken
        return Outlets(send, send_run)

    def _batched_run(self, deliveries: GroupDelivery, candidates: list[ServedConsumer],
                     turn: int, state: DeliveryState, sent_us: int, node_id: bytes,
                     seqs: list[int], values: list[bytes]) -> tuple[int, int]:
        """A run to consumers taking batches, each filled to its credit in turn from
        ``turn``; returns how many went and the next turn."""
        # (this node's own messages only: their seqs are never given out again, where a
        # replay's id may be, once it ended)
        shared = deliveries.shares_reads() and state is deliveries.state
        entries, acks = (self._shared_entries if shared else _batch_entries)(node_id, seqs,
                                                                             values)
        count, ack_timeout_us = len(candidates), state.ack_timeout_us
        total, taken = len(entries), 0
        for _ in range(count):
            consumer = candidates[turn]
            took = self._fill(consumer, entries, taken, total, sent_us, ack_timeout_us)
            if took > taken:
                given = seqs[taken:took]
                consumer.hold_run(deliveries.keys_of(node_id, given))  # (no set work: its ACK's)
                # its ACK of just these, as ack_many sends it, is known (the last piece
                # it was given: one of more pieces or of other keys is read as it came)
                consumer.sent = sent_keys(acks, taken, took, node_id, given)
                taken = took
                if taken == total:
                    return taken, turn
            turn = turn + 1 if turn + 1 < count else 0
        self.blocked = True
        return taken, turn

    def _plain_run(self, deliveries: GroupDelivery, candidates: list[ServedConsumer],
                   turn: int, state: DeliveryState, sent_us: int, node_id: bytes,
                   seqs: list[int], values: list[bytes]) -> tuple[int, int]:
        """A run to consumers taking one message a delivery, round robin from
        ``turn`` as far as their credit goes; returns how many went and the next turn
        (a refused one's: one at a time goes on from it with the rest)."""
        order = round_robin_turns(candidates, turn, len(seqs))
        if not order:
            return 0, turn  # (no credit: one at a time says it is blocked)
        self.batch.close()
        heads = {consumer: tuple(consumer.head) for consumer in candidates}
        sent, error = send_deliveries(self.socket, map(heads.__getitem__, order),
                                      delivery_frames_of_run(
                                          node_id, seqs[:len(order)], values[:len(order)],
                                          sent_us, state.ack_timeout_us))
        if sent:
            given = order[:sent]
            held_keys = deliveries.keys_of(node_id, seqs[:sent])
            for consumer in set(given):
                consumer.held.update(compress(held_keys, map(is_, given, repeat(consumer))))
        if error is None:
            return sent, (candidates.index(order[-1]) + 1) % len(candidates)
        refused = order[sent]
        if not isinstance(error, zmq.Again):
            self._unreachable(refused, error)
        return sent, candidates.index(refused)

    def _shared_entries(self, node_id: bytes, seqs: list[int], values: list[bytes]
                        ) -> tuple[list[bytes], bytes | None]:
        """A run's batch entries, kept for the other groups of its topic, which send
        the same messages in the same entries (each made once, not once a group); the
        same run's (its lists the same objects) as the same list of entries."""
        run = self._runs.get(seqs)
        if run is not None and run[1] is values and run[0] == node_id:
            return run[2], run[3]
        entries, acks = self._entries_made(node_id, seqs, values)
        # (the records were measured for the run already: their longest found there)
        self._runs.keep(seqs, values, (node_id, values, entries, acks), longest(values))
        return entries, acks

    def _entries_made(self, node_id: bytes, seqs: list[int], values: list[bytes]
                      ) -> tuple[list[bytes], bytes | None]:
        """A run's entries made, but for those another group's run made already (it is
        ahead, or its read started elsewhere): those are taken from the kept runs
        (each run's entries one list, not one look-up a message), the rest made. Its
        keys as an ACK names them only where it was made whole."""
        if not seqs or seqs[-1] - seqs[0] != len(seqs) - 1:
            return _batch_entries(node_id, seqs, values)  # (not a run: made whole)

        def entries_of(run: tuple[bytes, list[bytes], list[bytes], bytes | None]
                       ) -> list[bytes] | None:
            return run[2] if run[0] == node_id else None

        found = self._runs.run_from(seqs[0], len(seqs), entries_of)
        at = len(found)
        if not at:
            return _batch_entries(node_id, seqs, values)
        if at == len(seqs):
            return found, None
        return found + _batch_entries(node_id, seqs[at:], values[at:])[0], None

    def _fill(self, consumer: ServedConsumer, entries: list[bytes], start: int, stop: int,
              sent_us: int, ack_timeout_us: int) -> int:
        """Batch entries from ``start`` on to the consumer, as far as its credit and
        its pipe go; returns where those it took end."""
        if consumer.unreachable:
            return start
        stop = min(stop, start + consumer.window - consumer.held_count)
        add_run, at = self.batch.add_run, start
        try:
            while at < stop:
                at = add_run(consumer, entries, at, stop, sent_us, ack_timeout_us)
        except zmq.Again:
            pass  # its pipe is full
        except zmq.ZMQError as exc:
            self._unreachable(consumer, exc)
        return at

    def _avoiding_expired(self, deliveries: GroupDelivery, candidates: list[ServedConsumer],
                          put: Put, base: int) -> Outlet:
        """The same, while some consumer has deliveries it let expire: one of those
        goes to another consumer first, and back to the same one only when no other
        takes it (on the credit it still spends)."""
        count = len(candidates)
        turn = 0

        def offer(consumer: ServedConsumer, key: bytes, value: bytes, deliveries: int,
                  held_key: Key) -> bool:
            """Sent to this consumer if it has credit (one it let expire comes back on
            the credit it still spends)."""
            held, overdue = consumer.held, consumer.overdue
            again = held_key in overdue
            if consumer.unreachable or len(held) + len(overdue) - again >= consumer.window:
                return False
            if not put(consumer, key, value, deliveries):
                return False
            if again:
                overdue.discard(held_key)
            held.add(held_key)
            return True

        def send(seq: int, key: bytes, value: bytes, deliveries: int) -> bool:
            nonlocal turn
            held_key = base | seq  # (``base_for`` the state's origin)
            expired_at = []
            for _ in range(count):
                consumer = candidates[turn]
                turn = turn + 1 if turn + 1 < count else 0
                if held_key in consumer.overdue:
                    expired_at.append(consumer)  # it let this one expire: others first
                elif offer(consumer, key, value, deliveries, held_key):
                    return True
            if any(offer(consumer, key, value, deliveries, held_key)
                   for consumer in expired_at):
                return True
            self.blocked = True
            return False
        return send

    def _unreachable(self, consumer: ServedConsumer, exc: zmq.ZMQError) -> None:
        """A send found no peer: stop sending to it; its ACKs and BYE still count."""
        if exc.errno != errno.EHOSTUNREACH:
            raise exc
        consumer.unreachable = True
        self.found_unreachable = True
