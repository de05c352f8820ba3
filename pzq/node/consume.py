"""The consume endpoint (--consume-dsn): consumer groups over a ROUTER.

Each named group of a topic has one DeliveryState over its GroupArea, shared by its
consumers; each consumer (one DEALER connection) holds at most ``window`` unacked
deliveries (credits), round robin within the group. A consumer that says BYE, whose
connection is gone (a send to it finds no peer) or that is silent for
HEARTBEAT_MISSES heartbeats has its deliveries given back at once.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.counters import Counters
from pzq.delivery.groups import GroupArea
from pzq.delivery.state import DeliverySettings, DeliveryState
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.node.archiving import Archiving
from pzq.protocol import consume as wire
from pzq.store import keyspace
from pzq.store.store import Batch, Store
from pzq.store.topics import DEFAULT_GROUP, Group, Topic, Topics
from pzq.zmqio import Socket, drain, readable, send_frames

log = get_logger("pzq.consume")

HEARTBEAT_MISSES = 3  # silent this many heartbeat periods: the consumer is gone
KEY_SEQ_AT = keyspace.NODE_ID_LENGTH + 1  # "<node id>-<seq hex>"
Removed = Callable[[bytes, int], None]  # origin, seq: deleted here, drop the copies


@dataclass(eq=False)
class Consumer:
    routing_id: bytes
    group: GroupDelivery
    window: int
    last_heard: float
    held: set[int] = field(default_factory=set)

    @property
    def room(self) -> int:
        return self.window - len(self.held)


class GroupDelivery:
    """One named group: its delivery state, its consumers, and who holds what."""

    def __init__(self, group: Group, state: DeliveryState) -> None:
        self.group = group
        self.state = state
        self.counters = state.counters
        self.consumers: list[Consumer] = []
        self.owner: dict[int, Consumer] = {}
        self.topic_frame = group.topic.name.encode()
        self.group_frame = group.name.encode()
        self._turn = 0

    def room(self) -> int:
        return sum(max(0, consumer.room) for consumer in self.consumers)

    def next_consumers(self) -> list[Consumer]:
        """Consumers with credit, starting after the last one served."""
        count = len(self.consumers)
        self._turn = (self._turn + 1) % max(1, count)
        ordered = self.consumers[self._turn:] + self.consumers[:self._turn]
        return [consumer for consumer in ordered if consumer.room > 0]

    def release(self, seq: int) -> None:
        consumer = self.owner.pop(seq, None)
        if consumer is not None:
            consumer.held.discard(seq)

    def settle(self) -> None:
        """Forget owners of deliveries the state took back (expired, evicted)."""
        inflight = self.state.inflight
        for seq in [seq for seq in self.owner if seq not in inflight]:
            self.release(seq)


class ConsumeEndpoint:
    def __init__(self, socket: Socket, events: Socket, store: Store, topics: Topics,
                 archiving: Archiving | None, settings: DeliverySettings,
                 heartbeat_us: int, batch_size: int, removed: Removed) -> None:
        self.socket = socket
        self.store = store
        self.topics = topics
        self.archiving = archiving
        self.settings = settings  # --delivery-headers applies here as on --send-dsn
        self.heartbeat_s = heartbeat_us / 1e6
        self.batch_size = batch_size
        self.removed = removed
        self.events = events  # the socket's disconnections: look for who went
        self.groups: dict[int, GroupDelivery] = {}
        self.consumers: dict[bytes, Consumer] = {}
        self.blocked = False  # a consumer's pipe was full: try again soon
        self._next_heartbeat = 0.0
        self._probe_due = 0.0  # when a look for gone consumers was put off (0: none)
        for group in topics.groups():
            self._deliveries_for(group)

    def _deliveries_for(self, group: Group) -> GroupDelivery:
        found = self.groups.get(group.id)
        if found is None:
            state = DeliveryState(GroupArea(self.store, self.topics, group), self.settings,
                                  Counters())
            self.store.register(state)
            found = self.groups[group.id] = GroupDelivery(group, state)
        return found

    # -- requests ---------------------------------------------------------------

    def take(self, batch: Batch, now_us: int, mono: float) -> None:
        for raw in drain(self.socket, self.batch_size):
            routing_id = raw[0]
            consumer = self.consumers.get(routing_id)
            if consumer is not None:
                consumer.last_heard = mono
            try:
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
            raise DecodeError(f"{verb.decode()} before CONSUME: send CONSUME first")
        elif verb == wire.BYE:
            self._gone(consumer, "bye")
        else:
            self._answer(batch, consumer, verb == wire.ACK, request.keys, now_us)

    def _subscribe(self, batch: Batch, routing_id: bytes, consumer: Consumer | None,
                   subscribe: wire.Subscribe, now_us: int, mono: float) -> None:
        if consumer is not None:
            group = consumer.group.group
            raise DecodeError(f"this connection consumes group {group.name} of topic "
                              f"{group.topic.name} already; open another one")
        group = self.find_or_make(batch, subscribe, now_us)
        deliveries = self._deliveries_for(group)
        consumer = Consumer(routing_id, deliveries, subscribe.window, mono)
        deliveries.consumers.append(consumer)
        self.consumers[routing_id] = consumer
        self._send(wire.encode_consuming(routing_id, subscribe, int(self.heartbeat_s * 1000)))
        log.info("consumer_joined", topic=group.topic.name, group=group.name,
                 window=subscribe.window, consumers=len(deliveries.consumers))

    def find_or_make(self, batch: Batch, subscribe: wire.Subscribe, now_us: int) -> Group:
        """The group a CONSUME names, made when new; DecodeError says what is wrong."""
        topic = self.topics.topics.get(subscribe.topic)
        if topic is None:
            known = ", ".join(sorted(self.topics.topics)) or "none yet"
            raise DecodeError(f"no topic {subscribe.topic[:60]!r} (topics: {known}); produce "
                              "to it or declare it first")
        if subscribe.group == DEFAULT_GROUP:
            raise DecodeError("the group default is the consumers on --send-dsn; name "
                              "another group")
        group = topic.groups.get(subscribe.group)
        if group is None:
            return self.make_group(batch, topic, subscribe.group, subscribe.start,
                                   subscribe.filter, now_us)
        if group.filter != subscribe.filter:
            raise DecodeError(f"group {group.name} of topic {topic.name} has filter "
                              f"{group.filter!r}, not {subscribe.filter!r}")
        return group

    def make_group(self, batch: Batch, topic: Topic, name: str, start: str | int,
                   pattern: str, now_us: int) -> Group:
        try:
            group = self.topics.add_group(topic, name, self._start_seq(topic, start),
                                          pattern, now_us)
        except ValueError as exc:
            raise DecodeError(str(exc)) from None
        batch.put(keyspace.group_key(topic.id, name.encode()), group.encode())
        self._deliveries_for(group)
        log.info("group_created", topic=topic.name, group=name, start=str(start),
                 filter=pattern, start_seq=group.start_seq)
        return group

    def _start_seq(self, topic: Topic, start: str | int) -> int:
        """earliest: every message still stored; latest: the next new one; a time:
        the first message stored at or after it (a walk of the topic's messages)."""
        if start == wire.START_WORDS[0]:
            return 0
        if start == wire.START_WORDS[1] or not isinstance(start, int):
            return self.store.next_seq
        return self.topics.first_stored_since(topic, start)

    def _answer(self, batch: Batch, consumer: Consumer, ok: bool,
                keys: tuple[bytes, ...], now_us: int) -> None:
        deliveries = consumer.group
        for key in keys:
            node_id, seq = keyspace.parse_message_key(key)
            if node_id != self.store.node_id:
                deliveries.counters.unknown_acks += 1
                continue
            deliveries.release(seq)
            if not ok:
                deliveries.state.nack(seq)
            elif not self._ack(batch, deliveries.state, key, seq, now_us):
                log.debug("consume_ack_unknown", key=key.decode(), group=consumer.group.group.name)

    def _ack(self, batch: Batch, state: DeliveryState, key: bytes, seq: int,
             now_us: int) -> bool:
        area = state.area
        assert isinstance(area, GroupArea)
        final = area.would_release(seq)
        if final and self.archiving is not None \
                and not self.archiving.acked(state, batch, key, seq, now_us):
            return True  # not archived, so not removed: it will be delivered again
        if state.ack(batch, seq) is None:
            return False
        if final:
            self.removed(self.store.node_id, seq)
        return True

    # -- an operator's changes ---------------------------------------------------

    def forget(self, seq: int) -> None:
        """An operator deleted the message: no group delivers it any more."""
        for deliveries in self.groups.values():
            deliveries.state.forget(seq)
            deliveries.release(seq)

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
        return any(group.consumers and group.state.has_work() for group in self.groups.values())

    def deliver(self, now_us: int) -> None:
        self.blocked = False
        gone: list[Consumer] = []
        for deliveries in self.groups.values():
            room = deliveries.room()
            if room > 0 and deliveries.state.has_work():
                evicted = deliveries.counters.evicted
                send = self._sender(deliveries, gone)
                deliveries.state.deliver(send, now_us, min(room, self.batch_size))
                if deliveries.counters.evicted != evicted:
                    deliveries.settle()
            # also those given back dead by a NACK this wake, before the next batch
            # deletes them
            self._retire_dead(deliveries.state, now_us)
        for consumer in gone:
            self._gone(consumer, "disconnected")

    def _retire_dead(self, state: DeliveryState, now_us: int) -> None:
        """Messages the group gave up this wake (counted already). One no other group
        holds is deleted with this wake's batch: it is archived as a dead letter now,
        while who held it can still be told; one others still hold is archived once
        they are done with it."""
        dead = state.take_newly_dead()
        if self.archiving is None or not dead:
            return
        area = state.area
        assert isinstance(area, GroupArea)
        for entry in dead:
            if area.would_release(entry.seq):
                self.archiving.given_up_by_last_group(entry, now_us, self.store.node_id,
                                                      area.group_names(entry.seq))

    def _sender(self, deliveries: GroupDelivery,
                gone: list[Consumer]) -> Callable[[list[bytes]], bool]:
        """Round robin over the consumers with credit, in the order of this call."""
        candidates = deliveries.next_consumers()
        turn = 0

        def send(frames: list[bytes]) -> bool:
            nonlocal turn
            seq = int(frames[0][KEY_SEQ_AT:], 16)
            for _ in range(len(candidates)):
                consumer = candidates[turn % len(candidates)]
                turn += 1
                if consumer.room <= 0 or consumer in gone:
                    continue
                sent = self._try_send(wire.encode_deliver(
                    consumer.routing_id, deliveries.topic_frame, deliveries.group_frame,
                    frames))
                if sent is None:
                    gone.append(consumer)
                elif sent:
                    consumer.held.add(seq)
                    deliveries.owner[seq] = consumer
                    return True
            self.blocked = True
            return False
        return send

    def _try_send(self, frames: list[bytes]) -> bool | None:
        """True sent; False the consumer's pipe is full; None the consumer is gone."""
        try:
            send_frames(self.socket, frames)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno == errno.EHOSTUNREACH:
                return None
            raise
        return True

    def _send(self, frames: list[bytes]) -> None:
        try:
            send_frames(self.socket, frames)
        except zmq.ZMQError:
            pass  # gone or not reading: an answer is not owed

    def _error(self, routing_id: bytes, text: str) -> None:
        log.debug("consume_request_refused", reason=text)
        self._send(wire.encode_error(routing_id, text))

    # -- consumers leaving, heartbeats, expiry ------------------------------------

    def _gone(self, consumer: Consumer, reason: str) -> None:
        """Give back what the consumer holds, at once."""
        if self.consumers.pop(consumer.routing_id, None) is None:
            return
        deliveries = consumer.group
        deliveries.consumers.remove(consumer)
        held = sorted(consumer.held)
        for seq in held:
            deliveries.release(seq)
            deliveries.state.nack(seq)
        log.info("consumer_left", topic=deliveries.group.topic.name,
                 group=deliveries.group.name, reason=reason, given_back=len(held))

    def tick(self, mono: float, disconnected: bool) -> None:
        """Heartbeats out; silent consumers and vanished connections given back.
        ``disconnected``: the poll saw a disconnection event. What a consumer sent
        before it went (its last ACKs, its BYE) is read first: while input waits, the
        look is put off to the next wake, for at most a heartbeat period."""
        if disconnected:
            while self.events.poll(0):
                recv_monitor_message(self.events)
            self._probe_due = self._probe_due or mono
        if not self._probe_due and mono < self._next_heartbeat:
            return
        due = self._probe_due or mono
        if readable(self.socket) and mono - due < self.heartbeat_s:
            self._probe_due = due
            return
        self._probe_due = 0.0
        self._probe(mono)

    def _probe(self, mono: float) -> None:
        self._next_heartbeat = mono + self.heartbeat_s
        silent_after = HEARTBEAT_MISSES * self.heartbeat_s
        for consumer in list(self.consumers.values()):
            if mono - consumer.last_heard > silent_after:
                self._gone(consumer, "silent")
            elif self._try_send([consumer.routing_id, wire.HEARTBEAT]) is None:
                self._gone(consumer, "disconnected")

    def timeout_ms(self, mono: float) -> int | None:
        if self.blocked or self._probe_due:
            return 5
        if not self.consumers:
            return None
        return max(0, int((self._next_heartbeat - mono) * 1000) + 1)

    def reap(self, now_us: int) -> None:
        """Expired deliveries back; each group's floor raised (so a restart reads on
        from where the group is, not from its start)."""
        for deliveries in self.groups.values():
            state = deliveries.state
            if state.reap(now_us):
                deliveries.settle()
            self._retire_dead(state, now_us)
            self.topics.raise_floor(deliveries.group, state.lowest_open())
