"""The consume endpoint (--consume-dsn): consumer groups over a ROUTER.

Each named group of a topic has one DeliveryState over its GroupArea, shared by its
consumers; each consumer (one DEALER connection) holds at most ``window`` unacked
deliveries (credits), round robin within the group. A consumer that says BYE or
whose connection is gone (``pzq.node.consume_liveness``) has its deliveries given
back at once; one that is alive keeps them until their ack deadline, whatever its
code is doing.

While this node has taken over down nodes, a group also gets their messages of its
topic that their group of the same name holds (``pzq.node.consume_groups``); a
CONSUME for such a group is accepted here even before this node has the topic or
the group (they are made, as for any new name).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import zmq

from pzq.counters import Counters
from pzq.delivery.groups import GroupArea, group_settings
from pzq.delivery.state import DeliverySettings, DeliveryState
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.node import consume_verbs
from pzq.node.archiving import Archiving
from pzq.node.consume_groups import Consumer, GroupDelivery, Key, TakenOver
from pzq.node.consume_liveness import ConsumerLiveness
from pzq.node.consume_subscribe import make_group, named_group
from pzq.node.consumer_acks import Removed
from pzq.protocol import consume as wire
from pzq.protocol.message_keys import NODE_ID_LENGTH, parse_message_key
from pzq.store.store import Batch, Store
from pzq.store.topics import Group, Topic, Topics
from pzq.zmqio import Socket, drain, send_frames, send_headed

log = get_logger("pzq.consume")

KEY_SEQ_AT = NODE_ID_LENGTH + 1  # "<node id>-<seq hex>"


def no_takeovers(topic: str, group: str) -> dict[bytes, DeliveryState]:
    return {}


class ConsumeEndpoint:
    def __init__(self, socket: Socket, events: Socket, store: Store, topics: Topics,
                 archiving: Archiving | None, settings: DeliverySettings,
                 heartbeat_us: int, batch_size: int, removed: Removed,
                 taken_over: TakenOver = no_takeovers) -> None:
        self.socket = socket
        self.taken_over = taken_over
        # Set by a cluster node: whether own messages may go out yet (after a start),
        # and which of them another node still has out.
        self.own_allowed: Callable[[float], bool] = lambda mono: True
        self._held_elsewhere: Callable[[int], bool] = lambda seq: False
        self.lowest_held: Callable[[], int | None] = lambda: None
        self.store = store
        self.topics = topics
        self.archiving = archiving
        self.settings = settings  # --delivery-headers applies here as on --send-dsn
        self.heartbeat_s = heartbeat_us / 1e6
        self.batch_size = batch_size
        self.removed = removed
        self.events = events
        self.liveness = ConsumerLiveness(socket, events, self.heartbeat_s)
        self.groups: dict[int, GroupDelivery] = {}
        self.confirmations = consume_verbs.Confirmations(self._send)
        self._refused_acks = consume_verbs.RefusedAcks()
        store.register(self.confirmations)
        self.consumers: dict[bytes, Consumer] = {}
        self.blocked = False  # a consumer's pipe was full: try again soon
        self._found_unreachable = False  # a send this wake found a consumer gone
        for group in topics.groups():
            self._deliveries_for(group)

    def _deliveries_for(self, group: Group) -> GroupDelivery:
        found = self.groups.get(group.id)
        if found is None:
            state = DeliveryState(GroupArea(self.store, self.topics, group),
                                  group_settings(self.settings, group), Counters())
            state.held_elsewhere = self._held_elsewhere
            self.store.register(state)
            found = self.groups[group.id] = GroupDelivery(group, state, self.taken_over)
        return found

    @property
    def held_elsewhere(self) -> Callable[[int], bool]:
        return self._held_elsewhere

    @held_elsewhere.setter
    def held_elsewhere(self, held: Callable[[int], bool]) -> None:
        """Given to every group's state as it is (it is asked once per message)."""
        self._held_elsewhere = held
        for deliveries in self.groups.values():
            deliveries.state.held_elsewhere = held

    # -- requests ---------------------------------------------------------------

    def take(self, batch: Batch, now_us: int, mono: float) -> None:
        consumers = self.consumers
        for raw in drain(self.socket, self.batch_size):
            routing_id = raw[0]
            consumer = consumers.get(routing_id)
            try:
                if consumer is not None:
                    consumer.last_heard = mono
                    keys = wire.ack_keys(raw[1:])
                    if keys is not None:  # the common request, without a Request
                        self._answer(batch, consumer, True, keys, now_us)
                        continue
                request = wire.decode_request(raw[1:])
                self._serve(batch, routing_id, consumer, request, now_us, mono)
            except DecodeError as exc:
                self._error(routing_id, str(exc))

    def _serve(self, batch: Batch, routing_id: bytes, consumer: Consumer | None,
               request: wire.Request, now_us: int, mono: float) -> None:
        verb = request.verb
        if verb == wire.CONSUME and request.subscribe is not None:
            self._subscribe(batch, routing_id, consumer, request.subscribe, now_us, mono)
        elif verb == wire.HEARTBEAT:
            if consumer is None:
                raise DecodeError("HEARTBEAT before CONSUME: send CONSUME first")
        elif consumer is None:
            if verb == wire.ACK:  # (a restart forgot the connection): its keys come back
                self._error(routing_id, "ACK before CONSUME: send CONSUME first")
                self._send(wire.encode_refused(routing_id, request.keys))
                self._refused_acks.keep(routing_id, request.keys)
                return
            raise DecodeError(f"{verb.decode()} before CONSUME: send CONSUME first")
        elif verb == wire.BYE:
            self._gone(consumer, "bye")
        elif verb == wire.WORKING:
            consume_verbs.extend(consumer, request.keys, now_us)
        elif verb == wire.REJECT:
            consume_verbs.reject(consumer, request.keys)
        else:
            due_us = now_us + request.delay_ms * 1000 if request.delay_ms else 0
            self._answer(batch, consumer, verb == wire.ACK, request.keys, now_us, due_us)

    def _subscribe(self, batch: Batch, routing_id: bytes, consumer: Consumer | None,
                   subscribe: wire.Subscribe, now_us: int, mono: float) -> None:
        if consumer is not None:
            group = consumer.group.group
            raise DecodeError(f"this connection consumes group {group.name} of topic "
                              f"{group.topic.name} already; open another one")
        group = named_group(self.topics, batch, subscribe, now_us, self.taken_over)
        deliveries = self._deliveries_for(group)
        consumer = Consumer(routing_id, deliveries, subscribe.window, mono,
                            confirm=subscribe.confirm)
        deliveries.consumers.append(consumer)
        self.consumers[routing_id] = consumer
        self._send(wire.encode_consuming(routing_id, subscribe, int(self.heartbeat_s * 1000)))
        log.info("consumer_joined", topic=group.topic.name, group=group.name,
                 window=subscribe.window, consumers=len(deliveries.consumers))
        # ACKs refused on this connection before its CONSUME (kept here, and sent
        # again with it): applied before anything is delivered
        acked = (*self._refused_acks.take(routing_id), *subscribe.acked)
        if acked:
            self._answer(batch, consumer, True, acked, now_us)

    def make_group(self, batch: Batch, topic: Topic, name: str, start: str | int,
                   pattern: str, now_us: int) -> Group:
        """A group an operator declares."""
        group = make_group(self.topics, batch, topic, name, start, pattern, now_us)
        self._deliveries_for(group)
        return group

    def settings_changed(self, group: Group) -> None:
        """An operator declared the group's own settings: its state takes them now."""
        found = self.groups.get(group.id)
        if found is not None:
            found.state.apply(group_settings(self.settings, group))

    def _answer(self, batch: Batch, consumer: Consumer, ok: bool,
                keys: list[bytes] | tuple[bytes, ...], now_us: int, due_us: int = 0) -> None:
        if ok and consumer.confirm:
            self.confirmations.owe(consumer.routing_id, keys)
        deliveries = consumer.group
        own = deliveries.state
        own_id = own.area.node_id
        owner = deliveries.owner
        overdue = consumer.overdue
        for key in keys:
            node_id, seq = parse_message_key(key)
            held_key = (node_id, seq)
            # it let this one expire: its credit comes back (no hashing while none did)
            late = held_key in overdue if overdue else False
            if late:
                overdue.discard(held_key)
            state = own if node_id == own_id else deliveries.state_for(node_id)
            if state is None:
                deliveries.counters.unknown_acks += 1
            elif not ok:
                self._nack(consumer, state, held_key, late, due_us)
            else:
                holder = owner.pop(held_key, None)  # whoever has it now: it is done
                if holder is not None:
                    holder.held.discard(held_key)
                if not self._ack(batch, deliveries, state, key, seq, now_us):
                    log.debug("consume_ack_unknown", key=key.decode(),
                              group=deliveries.group.name)

    def _nack(self, consumer: Consumer, state: DeliveryState, held_key: Key,
              late: bool, due_us: int) -> None:
        """Give back what this consumer holds (to go again at once, or at ``due_us``);
        a NACK of what expired here was given back at its deadline, and another
        consumer may have it now: left alone."""
        if consumer.group.owner.get(held_key) is consumer:
            consumer.group.release(held_key)
            state.nack(held_key[1], due_us)
        elif not late:
            state.counters.unknown_acks += 1

    def _ack(self, batch: Batch, deliveries: GroupDelivery, state: DeliveryState,
             key: bytes, seq: int, now_us: int) -> bool:
        final = state.area.would_release(seq)
        if final and self.archiving is not None \
                and not self.archiving.acked(state, batch, key, seq, now_us):
            return True  # not archived, so not removed: it will be delivered again
        if state.ack(batch, seq) is None:
            return False
        self.removed(state.area.node_id, seq, deliveries.group.name, final)
        return True

    def done_elsewhere(self, batch: Batch, name: str, seqs: list[int]) -> None:
        """Own messages the group ``name`` of their topic finished on a node that took
        them over while this one was down (a group this node does not know is that
        node's own). One the last holding group finished is deleted everywhere."""
        node_id = self.store.node_id
        for seq in seqs:
            value = self.store.get_own(seq)
            if value is None:
                continue
            group = self.topics.describe(value)[0].groups.get(name)
            deliveries = self.groups.get(group.id) if group is not None else None
            if deliveries is None:
                continue
            deliveries.release((node_id, seq))
            final = deliveries.state.area.would_release(seq)
            if deliveries.state.ack(batch, seq) is not None and final:
                self.removed(node_id, seq, name, True)

    def rewind_own(self) -> None:
        """Another node let messages go: look at each group's messages again."""
        for deliveries in self.groups.values():
            deliveries.state.rewind()

    # -- an operator's changes ---------------------------------------------------

    def forget(self, seq: int) -> None:
        """An operator deleted the message: no group delivers it any more."""
        for deliveries in self.groups.values():
            deliveries.state.forget(seq)
            deliveries.release((self.store.node_id, seq))

    def drop_group(self, topic: Topic, name: str) -> None:
        """An operator removed the group: its consumers are told and let go."""
        for group_id, deliveries in list(self.groups.items()):
            if deliveries.group.topic is topic and deliveries.group.name == name:
                for consumer in list(deliveries.consumers):
                    self._error(consumer.routing_id, f"group {name} of topic {topic.name} "
                                "was removed")
                    self.consumers.pop(consumer.routing_id, None)
                deliveries.consumers.clear()
                deliveries.owner.clear()
                deliveries.state.paused = True
                del self.groups[group_id]

    # -- deliveries ---------------------------------------------------------------

    def has_work(self) -> bool:
        return any(group.consumers and any(state.has_work() for state in group.sources(True))
                   for group in self.groups.values())

    def deliver(self, now_us: int, mono: float) -> None:
        self.blocked = False
        self._found_unreachable = False
        own_allowed = self.own_allowed(mono)
        for deliveries in self.groups.values():
            for state in deliveries.sources(own_allowed):
                room = deliveries.room()
                if room > 0 and state.has_work():
                    evicted = state.counters.evicted
                    send = self._sender(deliveries)
                    state.deliver(send, now_us, min(room, self.batch_size))
                    if state.counters.evicted != evicted:
                        deliveries.settle()
            # also those given back dead by a NACK this wake, before the next batch
            # deletes them
            self._retire_dead(deliveries, now_us)
        if self._found_unreachable:  # what it sent before it went is read first
            self.liveness.look_soon(mono)

    def _retire_dead(self, deliveries: GroupDelivery, now_us: int) -> None:
        """Messages the group gave up this wake (counted already): the group is done
        with them. One no other group holds moves to the node's dead letters with
        the next batch and is archived now, while who held it can still be told (a
        failed write leaves it in the dead letters); one others still hold is
        archived once they are done with it."""
        for state in (deliveries.state, *deliveries.taken_over().values()):
            area = state.area
            for entry in state.take_newly_dead():
                final = area.would_release(entry.seq)
                if final and self.archiving is not None:
                    self.archiving.given_up_by_last_group(entry, now_us, area.node_id,
                                                          area.group_names(entry.seq))
                self.removed(area.node_id, entry.seq, deliveries.group.name, final)

    def _sender(self, deliveries: GroupDelivery) -> Callable[[list[bytes]], bool]:
        """Round robin over the consumers with credit, in the order of this call.
        Per message only what must be: the send (after each consumer's fixed frames,
        built once) and who holds it. Deliveries expire only at a reap, so when no
        consumer has one overdue now, none will have during this send."""
        candidates = deliveries.next_consumers()
        if deliveries.any_overdue():
            return self._sender_avoiding_expired(deliveries, candidates)
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

    def _sender_avoiding_expired(self, deliveries: GroupDelivery,
                                 candidates: list[Consumer]) -> Callable[[list[bytes]], bool]:
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
        self._found_unreachable = True

    def _send(self, frames: list[bytes]) -> None:
        try:
            send_frames(self.socket, frames)
        except zmq.ZMQError:
            pass  # gone or not reading: an answer is not owed

    def _error(self, routing_id: bytes, text: str) -> None:
        log.debug("consume_request_refused", reason=text)
        self._send(wire.encode_error(routing_id, text))

    # -- consumers leaving, expiry ------------------------------------------------

    def _gone(self, consumer: Consumer, reason: str) -> None:
        """Give back what the consumer holds, at once."""
        if self.consumers.pop(consumer.routing_id, None) is None:
            return
        deliveries = consumer.group
        deliveries.consumers.remove(consumer)
        held = sorted(consumer.held)
        for key in held:
            deliveries.release(key)
            state = deliveries.state_for(key[0])
            if state is not None:
                state.nack(key[1])
        log.info("consumer_left", topic=deliveries.group.topic.name,
                 group=deliveries.group.name, reason=reason, given_back=len(held))

    def tick(self, mono: float, disconnected: bool) -> None:
        """What consumers whose connection went held is given back."""
        for consumer, reason in self.liveness.tick(mono, disconnected,
                                                   list(self.consumers.values())):
            self._gone(consumer, reason)

    def timeout_ms(self, mono: float) -> int | None:
        return self.liveness.timeout_ms(mono, self.blocked)

    def reap(self, now_us: int) -> None:
        """Expired deliveries back, overdue at the consumer that let them expire (a
        takeover's states are reaped with it); each group's floor raised (so a
        restart reads on from where the group is, not from its start)."""
        for deliveries in self.groups.values():
            state = deliveries.state
            if state.reap(now_us) or deliveries.taken_over():
                deliveries.settle(expired=True)
            self._retire_dead(deliveries, now_us)
            held = self.lowest_held()
            floor = state.lowest_open()
            self.topics.counts.raise_floor(deliveries.group, floor if held is None
                                    else min(floor, held))
