"""Deliveries sent to a group's consumers: round robin over those with credit, as
the consumers on --consume-dsn and the pool on --send-dsn both are.

Per message only what must be: the send (after each consumer's fixed frames, built
once) and who holds it. Deliveries expire only at a reap, so when no consumer has one
overdue now, none will have during one send.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import zmq

from pzq.protocol.message_keys import NODE_ID_LENGTH
from pzq.serving.holding import Consumer, GroupDelivery, Key
from pzq.zmqio import Socket, send_headed

KEY_SEQ_AT = NODE_ID_LENGTH + 1  # "<node id>-<seq hex>"
Send = Callable[[list[bytes]], bool]


class Sender:
    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.blocked = False  # no consumer's pipe took a delivery: try again soon
        self.found_unreachable = False  # a send found a consumer gone

    def for_pool(self, pool: Consumer) -> Send:
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

    def for_group(self, deliveries: GroupDelivery) -> Send:
        """A send for one pass over the group's states, in the order of this call."""
        candidates = deliveries.next_consumers()
        if deliveries.any_overdue():
            return self._avoiding_expired(deliveries, candidates)
        return self._round_robin(deliveries, candidates)

    def _round_robin(self, deliveries: GroupDelivery, candidates: list[Consumer]) -> Send:
        count = len(candidates)
        owner = deliveries.owner
        socket = self.socket
        turn = 0

        def send(frames: list[bytes]) -> bool:
            nonlocal turn
            for _ in range(count):
                consumer = candidates[turn]
                turn = turn + 1 if turn + 1 < count else 0
                held = consumer.held
                if consumer.unreachable or len(held) >= consumer.window:
                    continue
                try:
                    send_headed(socket, consumer.head, frames)
                except zmq.Again:
                    continue  # its pipe is full: the next one
                except zmq.ZMQError as exc:
                    self._unreachable(consumer, exc)
                    continue
                key = frames[0]
                held_key = (key[:NODE_ID_LENGTH], int(key[KEY_SEQ_AT:], 16))
                held.add(held_key)
                owner[held_key] = consumer
                return True
            self.blocked = True
            return False
        return send

    def _avoiding_expired(self, deliveries: GroupDelivery, candidates: list[Consumer]) -> Send:
        """The same, while some consumer has deliveries it let expire: one of those
        goes to another consumer first, and back to the same one only when no other
        takes it (on the credit it still spends there)."""
        count = len(candidates)
        offer = self._offerer(deliveries)
        turn = 0

        def send(frames: list[bytes]) -> bool:
            nonlocal turn
            key = frames[0]
            held_key = (key[:NODE_ID_LENGTH], int(key[KEY_SEQ_AT:], 16))
            expired_at = []
            for _ in range(count):
                consumer = candidates[turn]
                turn = turn + 1 if turn + 1 < count else 0
                if held_key in consumer.overdue:
                    expired_at.append(consumer)  # it let this one expire: others first
                elif offer(consumer, frames, held_key):
                    return True
            if any(offer(consumer, frames, held_key) for consumer in expired_at):
                return True
            self.blocked = True
            return False
        return send

    def _offerer(self, deliveries: GroupDelivery) -> Callable[[Consumer, list[bytes], Key],
                                                              bool]:
        owner = deliveries.owner
        socket = self.socket

        def offer(consumer: Consumer, frames: list[bytes], held_key: Key) -> bool:
            """Sent to this consumer if it has credit (one it let expire comes back on
            the credit it still spends)."""
            held, overdue = consumer.held, consumer.overdue
            again = held_key in overdue
            if consumer.unreachable or len(held) + len(overdue) - again >= consumer.window:
                return False
            try:
                send_headed(socket, consumer.head, frames)
            except zmq.Again:
                return False  # its pipe is full: the next one
            except zmq.ZMQError as exc:
                self._unreachable(consumer, exc)
                return False
            if again:
                overdue.discard(held_key)
            held.add(held_key)
            owner[held_key] = consumer
            return True
        return offer

    def _unreachable(self, consumer: Consumer, exc: zmq.ZMQError) -> None:
        """A send found no peer: stop sending to it; its ACKs and BYE still count."""
        if exc.errno != errno.EHOSTUNREACH:
            raise exc
        consumer.unreachable = True
        self.found_unreachable = True
