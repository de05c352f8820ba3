"""The consume endpoint (--consume-dsn): consumer groups over a ROUTER.

Each named group of a topic has one DeliveryState over its GroupArea, shared by its
consumers; each consumer (one DEALER connection) holds at most ``window`` unacked
deliveries (credits), round robin within the group. A consumer that says BYE or
whose connection is gone (``pzq.serving.liveness``) has its deliveries given
back at once; one that is alive keeps them until their ack deadline, whatever its
code is doing.

While this node has taken over down nodes, a group also gets their messages of its
topic that their group of the same name holds (``pzq.serving.holding``); a
CONSUME for such a group is accepted here even before this node has the topic or
the group (they are made, as for any new name). A group being replayed gets the
replay's messages the same way, each replay as one more origin (pzq.replay).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import zmq

from pzq.agenda import Agenda
from pzq.authorization import NO_AUTHORIZATION, Authorization, RulesReloaded
from pzq.clock import Now, wall_us
from pzq.counters import Counters
from pzq.delivery.expiry import NO_EXPIRY, Expiry
from pzq.delivery.groups import GroupArea, group_settings
from pzq.delivery.held import HeldElsewhere
from pzq.delivery.lanes import NO_LANES, Lanes, NoLanes
from pzq.delivery.settings import DeliverySettings
from pzq.delivery.state import DeliveryState
from pzq.delivery.waits import KeptWaits
from pzq.errors import DecodeError
from pzq.events import EventHub, GroupDoneElsewhere, PeersReleased, ReplayEnded
from pzq.hooks import nothing
from pzq.logs import get_logger
from pzq.parts import REAP, Part
from pzq.protocol import consume as consume_wire
from pzq.protocol.consume import ACK, Request
from pzq.protocol.message_keys import first_bad_key
from pzq.serving import verbs
from pzq.serving.answers import BULK_ACK_KEYS, GroupAnswers
from pzq.serving.connections import ConsumerCount
from pzq.serving.holding import NamedGroupDelivery, ServedConsumer, TakenOver, soonest_due_ms
from pzq.serving.liveness import ConsumerLiveness
from pzq.serving.named_groups import (
    drop_served_group,
    forget_served,
    served_last,
    settle_served,
)
from pzq.serving.other_origins import (
    NO_REPLAYS,
    ClusterWord,
    Replayed,
    finish_done_elsewhere,
    joined,
)
from pzq.serving.sending import Sender
from pzq.serving.subscribe import check_allowed, make_group, named_group, no_longer_allowed
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import Group, Topic, Topics
from pzq.zmqio import (
    LOOK_BEFORE_EACH,
    POLLIN,
    Events,
    PollEntry,
    Socket,
    drain_framed,
    send_frames,
)

log = get_logger("pzq.consume")
# the wake's batch, the consumer of the connection, its request, now (µs, monotonic)
Handler = Callable[[Batch, ServedConsumer, Request, int, float], None]


class ConsumeEndpoint(Part):
    """``heartbeat_ms`` and ``heartbeat_s``: --consume-heartbeat in ZeroMQ's unit and in
    the loop's clock's. ``held``: own messages other nodes have out, which no group
    delivers meanwhile.
    From the node's ``hub`` it hears of own messages a peer let go (each group looks
    again) and of those a group finished on a node that took them over."""

    served = True

    def __init__(self, socket: Socket, connections: ConsumerCount, store: Store, topics: Topics,
                 answers: GroupAnswers, settings: DeliverySettings,
                 heartbeat_ms: int, heartbeat_s: float, batch_size: int, cluster: ClusterWord,
                 held: HeldElsewhere, hub: EventHub, expiry: Expiry = NO_EXPIRY,
                 lanes: Lanes | NoLanes = NO_LANES,
                 authorization: Authorization = NO_AUTHORIZATION,
                 replays: Replayed = NO_REPLAYS, clock: Callable[[], int] = wall_us) -> None:
        self.socket = socket
        # µs since the epoch, read for a NACK with a delay once it is read: the wake's
        # time was read before its poll, and the requests are read one by one after
        # (tests pass their own)
        self.clock = clock
        self.authorization = authorization  # which keys may consume which groups
        self.expiry = expiry  # the node's own messages' (pzq.delivery.expiry)
        self.lanes = lanes  # priorities (pzq.delivery.lanes)
        self.taken_over: TakenOver = joined(cluster.takeovers.taken, replays)
        self.own_allowed = cluster.own_delivery_allowed
        self.held = held
        self.store = store
        self.topics = topics
        self.settings = settings  # --delivery-headers applies here as on --send-dsn
        self.heartbeat_ms = heartbeat_ms  # --consume-heartbeat, as CONSUMING says it
        self.batch_size = batch_size
        self.answers = answers
        self.connections = connections  # watching the socket since before its bind
        self.liveness = ConsumerLiveness(socket, heartbeat_s)
        self.groups: dict[int, NamedGroupDelivery] = {}
        self.confirmations = verbs.Confirmations(self._send)
        self._refused_acks = verbs.RefusedAcks()
        store.register(self.confirmations)
        self.consumers: dict[bytes, ServedConsumer] = {}
        self.sender = Sender(socket)
        self._poll_entry = PollEntry(socket)
        # this wake's requests were plain ACKs (or none): its deliveries may go before
        # the write (``send_early``); and whether they went
        self._plain = False
        self._sent_early = False
        self.wait_changed: Callable[[], None] = nothing  # the loop's agenda, once joined
        # What each verb does for a consumer of this connection (CONSUME is taken first,
        # and the rest before it by one rule, _before_consume); a new verb is its entry
        # here, its decoder (pzq.protocol.consume) and its client's method.
        self.handlers: dict[bytes, Handler] = {
            consume_wire.ACK: self._ack, consume_wire.NACK: self._nack,
            consume_wire.WORKING: self._working, consume_wire.REJECT: self._reject,
            consume_wire.HEARTBEAT: self._heartbeat, consume_wire.BYE: self._bye}
        for group in topics.groups():
            self._deliveries_for(group)
        hub.subscribe(PeersReleased, self.rewind_own)
        hub.subscribe(GroupDoneElsewhere, self.done_elsewhere)
        hub.subscribe(RulesReloaded, self.recheck)
        hub.subscribe(ReplayEnded, self.replay_ended)

    def _deliveries_for(self, group: Group) -> NamedGroupDelivery:
        found = self.groups.get(group.id)
        if found is None:
            state = DeliveryState(GroupArea(self.store, self.topics, group),
                                  group_settings(self.settings, group), Counters(), self.held,
                                  self.expiry, self.lanes.for_topic(group.topic),
                                  KeptWaits(self.store, group.id))
            self.store.register(state)
            found = self.groups[group.id] = NamedGroupDelivery(group, state, self.taken_over)
        return found

    # -- the loop's questions ------------------------------------------------------

    def bound(self) -> list[Socket]:
        return [self.socket]

    def polled(self) -> list[Socket | int]:
        return [self.connections.quiet.fd]

    def close(self) -> None:
        self.connections.close()
        self.socket.close()

    def interest(self, poller: zmq.Poller, now: Now, delivering: bool) -> None:
        # 0: out of the poll
        self._poll_entry.poll_for(poller, POLLIN if self.connections.listen() else 0)

    tells_wait = True  # asked in a wake with consumers, requests, (dis)connections, reaping

    def join(self, agenda: Agenda) -> None:
        self.connections.quiet.on_unread = self.wait_changed = partial(agenda.changed, self)

    def timeout_ms(self, now: Now) -> int | None:
        """The consumers' liveness, and the soonest delayed delivery's due time."""
        if self.connections.quiet.unread:  # connections to count: at once
            return 0
        return soonest_due_ms(self.groups.values(), now.wall_us,
                              self.liveness.timeout_ms(now.mono, self.sender.blocked))

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if REAP in reasons:
            self.reap(now.wall_us)
            self.wait_changed()

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        requests = events.get(self.socket, 0) & POLLIN
        others = bool(requests) and self.take_requests(batch, now.wall_us, now.mono)
        if others:
            self.answers.settle(batch)  # a wake of other requests keeps the old order
            self.wait_changed()  # (a NACK's delay, a consumer come or gone)
        self._plain = not others
        self.connections.heard(bool(requests))

    def send_early(self, events: Events, now: Now, delivering: bool) -> None:
        """A wake of plain ACKs whose batch stores nothing (the loop asks this only
        then): the delivery pass before the write, so a group drained alone gets its
        next batch without waiting for the write of the ACK before. Nothing it does
        needs that write first: an ACKed message is out of the in-flight table and its
        delete owed (a failed write keeps it for the next batch, and the message is
        not delivered meanwhile), and what the pass itself owes the store (how far
        first deliveries went, counts) is the next batch's either way. CONFIRM's
        ACKED still waits for the write (``confirmations``)."""
        if self._plain:
            self._plain = False
            self._sent_early = True
            self._serve_consumers(events, now, delivering)

    def settle(self, events: Events, batch: Batch, now: Now) -> None:
        """The plain ACKs' second half (``take_requests``: what no delivery pass asks
        of them), after the early pass: the next batch went out before it."""
        self.answers.settle(batch)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        self._plain = False
        if self._sent_early:  # (before the write, this wake)
            self._sent_early = False
            return
        self._serve_consumers(events, now, delivering)

    def _serve_consumers(self, events: Events, now: Now, delivering: bool) -> None:
        """The wait is told only when the consumers' liveness changed (a connection came
        or went, a pipe full, one gone): a pass delays nothing (a NACK's delays are told
        in ``take``, a reap's in ``on_ticks``, the takeovers' and replays' reaps' wake)."""
        liveness, sender = self.liveness, self.sender
        told = liveness.wait_key(sender.blocked)
        went = self.connections.came_or_went(events)
        if went:  # its consumer is looked at
            liveness.look_soon(now.mono)
        if delivering:
            self.tick(now.mono)
        self.deliver(now.wall_us, now.mono, delivering)
        if went is not None or liveness.wait_key(sender.blocked) != told:
            self.wait_changed()

    # -- requests ---------------------------------------------------------------

    def take_requests(self, batch: Batch, now_us: int, mono: float) -> bool:
        consumers, others = self.consumers, False  # others: a request but a plain ACK
        answers = self.answers
        for first, raw in drain_framed(self.socket, self.batch_size, LOOK_BEFORE_EACH):
            routing_id = raw[0]
            consumer = consumers.get(routing_id)
            try:
                if consumer is not None:
                    consumer.last_heard = mono
                    # the common cycle: an ACK of just the BATCH last sent, byte for
                    # byte, taken in one call (False: not that case, nothing done)
                    sent = consumer.sent
                    if sent is not None and len(raw) == 3 and raw[2] == sent[0] \
                            and raw[1] == ACK and not consumer.confirm \
                            and answers.ack_as_sent(batch, consumer, sent, now_us, mono):
                        continue
                    # an ACK of many keys in one frame: read as it came (keys owed an
                    # ACKED, with CONFIRM, go the long way: they are kept as keys)
                    numbers = None if consumer.confirm else (
                        consumer.numbers_if_sent(raw[1:])
                        or consume_wire.ack_key_numbers(raw[1:], BULK_ACK_KEYS))
                    if numbers is not None:  # its second half left for ``settle``
                        self.answers.ack_numbers(batch, consumer, numbers, now_us, mono,
                                                 True)
                        continue
                    keys = consume_wire.ack_keys(raw[1:])
                    if keys is not None:  # the common request, without a Request
                        self._answer(batch, consumer, True, keys, now_us, mono)
                        continue
                others = True
                self.answers.settle(batch)  # (the ACKs before it: in the order they came)
                request = consume_wire.decode_request(raw[1:])
                self._serve(batch, first, consumer, request, now_us, mono)
            except DecodeError as exc:
                self._error(routing_id, str(exc))
        return others

    def _serve(self, batch: Batch, first: zmq.Frame, consumer: ServedConsumer | None,
               request: Request, now_us: int, mono: float) -> None:
        """``first``: the request's first frame, its connection's routing id (and, with
        CURVE, its key)."""
        routing_id = first.bytes
        if request.subscribe is not None:  # CONSUME
            check_allowed(self.authorization, first, request.subscribe)
            self._subscribe(batch, routing_id, consumer, request.subscribe, now_us, mono,
                            self.authorization.key_of(first))
        elif consumer is None:
            self._before_consume(routing_id, request)
        else:
            self.handlers[request.verb](batch, consumer, request, now_us, mono)

    def _before_consume(self, routing_id: bytes, request: Request) -> None:
        """Every verb but CONSUME is refused on a connection that has not said CONSUME
        (or one a restart of the node forgot): the keys of an ACK come back too
        (REFUSED), and are kept, to be applied once the connection says CONSUME."""
        self._error(routing_id, f"{request.verb.decode()} before CONSUME: send CONSUME first")
        if request.verb == consume_wire.ACK:
            self._send(consume_wire.encode_refused(routing_id, request.keys))
            self._refused_acks.keep(routing_id, request.keys)

    # -- one handler per verb of a consumer that said CONSUME ----------------------

    def _ack(self, batch: Batch, consumer: ServedConsumer, request: Request, now_us: int,
             mono: float) -> None:
        self._answer(batch, consumer, True, request.keys, now_us, mono)

    def _nack(self, batch: Batch, consumer: ServedConsumer, request: Request, now_us: int,
              mono: float) -> None:
        # a delay counts from no sooner than the NACK came: the clock read now, after
        # it was read (the wake's time may be tens of ms older; only a NACK with a
        # delay pays the read)
        due_us = max(now_us, self.clock()) + request.delay_us if request.delay_us else 0
        self._answer(batch, consumer, False, request.keys, now_us, mono, due_us)

    def _working(self, batch: Batch, consumer: ServedConsumer, request: Request, now_us: int,
                 mono: float) -> None:
        verbs.extend(consumer, request.keys, now_us)

    def _reject(self, batch: Batch, consumer: ServedConsumer, request: Request, now_us: int,
                mono: float) -> None:
        verbs.reject(consumer, request.keys)

    def _heartbeat(self, batch: Batch, consumer: ServedConsumer, request: Request,
                   now_us: int, mono: float) -> None:
        pass  # heard: its connection is alive (``last_heard``, set for every request)

    def _bye(self, batch: Batch, consumer: ServedConsumer, request: Request, now_us: int,
             mono: float) -> None:
        self._gone(consumer, "bye")

    def _subscribe(self, batch: Batch, routing_id: bytes, consumer: ServedConsumer | None,
                   subscribe: consume_wire.Subscribe, now_us: int, mono: float,
                   key: str = "") -> None:
        if consumer is not None:
            raise DecodeError(f"this connection consumes group {consumer.group.name} of "
                              f"topic {consumer.group.topic} already; open another one")
        group = named_group(self.topics, batch, subscribe, now_us, self.taken_over)
        deliveries = self._deliveries_for(group)
        head = consume_wire.deliver_head(routing_id, deliveries.topic_frame, deliveries.group_frame,
                                 subscribe.protocol)
        consumer = ServedConsumer(routing_id, deliveries, subscribe.window, mono, head=head,
                                  confirm=subscribe.confirm, batches=subscribe.protocol > 1,
                                  key=key)
        deliveries.consumers.append(consumer)
        self.consumers[routing_id] = consumer
        self._send(consume_wire.encode_consuming(routing_id, subscribe, self.heartbeat_ms))
        log.info("consumer_joined", topic=group.topic.name, group=group.name,
                 window=subscribe.window, consumers=len(deliveries.consumers))
        # ACKs refused on this connection before its CONSUME (kept here, and sent
        # again with it): applied before anything is delivered
        acked = (*self._refused_acks.take(routing_id), *subscribe.acked)
        if acked:
            self._answer(batch, consumer, True, acked, now_us, mono)

    def _answer(self, batch: Batch, consumer: ServedConsumer, ok: bool,
                keys: list[bytes] | tuple[bytes, ...], now_us: int, mono: float,
                due_us: int = 0) -> None:
        if ok and consumer.confirm:  # ACKED once the batch holding them is written: the
            # keys before one that is no key, where the answer stops, refused (ACKED
            # named them all, the refused one and those after it, never ACKed, too)
            taken = first_bad_key(list(keys))
            self.confirmations.owe(consumer.routing_id, keys[:taken])
        self.answers.answer(batch, consumer, ok, keys, now_us, mono, due_us)

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

    def done_elsewhere(self, done: GroupDoneElsewhere) -> None:
        finish_done_elsewhere(done, self.store, self.topics, self.groups, self.answers)

    def recheck(self, reloaded: RulesReloaded) -> None:
        """New rules: a consumer whose key may no longer consume its group is told
        (ERROR, as a refused CONSUME) and let go, its deliveries given back."""
        for consumer, why in no_longer_allowed(self.authorization, self.consumers.values()):
            self._error(consumer.routing_id, why)
            self._gone(consumer, "forbidden")

    def replay_ended(self, ended: ReplayEnded) -> None:
        """A replay of a group ended: what its consumers held of it is theirs no more."""
        settle_served(self.groups, ended.topic, ended.group)

    def rewind_own(self, released: PeersReleased) -> None:
        """Another node let messages go: look at each group's messages again."""
        for deliveries in self.groups.values():
            deliveries.state.rewind()

    # -- an operator's changes ---------------------------------------------------

    def forget(self, seq: int) -> None:
        """An operator deleted the message: no group delivers it any more."""
        forget_served(self.groups, self.store.node_id, seq)

    def drop_group(self, topic: Topic, name: str) -> None:
        """An operator removed the group: its consumers are told and let go."""
        drop_served_group(self.groups, self.consumers, topic, name, self._error)

    # -- deliveries ---------------------------------------------------------------

    def backlogged(self) -> bool:
        return self.has_work()  # a group with consumers has messages to deliver

    def has_work(self) -> bool:
        return any(group.consumers and any(state.has_work() for state in group.sources(True))
                   for group in self.groups.values())

    def deliver(self, now_us: int, mono: float, delivering: bool = True) -> None:
        """Delayed deliveries whose wait is over are ready again, whether or not a
        consumer has room (so their time is not asked again); then, unless the node is
        stopping, each group's consumers get what they have room for. A group's states
        are asked for once."""
        sender = self.sender
        sender.blocked = sender.found_unreachable = False
        own_allowed = self.own_allowed(mono)
        served: list[int] = []
        for group_id, deliveries in self.groups.items():
            states = deliveries.every_state()
            for state in states:
                if state.delayed:
                    state.take_due(now_us)
            if not delivering:
                continue
            # a group whose consumers have no room (most of them, most wakes: their
            # batch is out) lists no sources; room changes only by what is sent here
            room = deliveries.room() if deliveries.consumers else 0
            if room > 0 and self._serve_group(deliveries, own_allowed, states, room, now_us):
                served.append(group_id)
            # also those given back dead by a NACK this wake, before the next batch deletes
            # them (asked here: most wakes none, and no call for it)
            for state in states:
                if state.newly_dead or state.newly_dropped:
                    self.answers.retire_dead(deliveries, now_us, states)
                    break
        if sender.found_unreachable:  # what it sent before it went is read first
            self.liveness.look_soon(mono)
        served_last(self.groups, served)

    def _serve_group(self, deliveries: NamedGroupDelivery, own_allowed: bool,
                     states: list[DeliveryState], room: int, now_us: int) -> bool:
        """What the group's consumers have ``room`` for, from each source in turn;
        whether any source had work."""
        sender, served = self.sender, False
        for state in deliveries.sources(own_allowed, states):
            if not state.has_work():
                continue
            evicted = state.counters.evicted
            outlets = sender.for_group(deliveries, state, now_us)
            state.deliver_raw(outlets.each, now_us, min(room, self.batch_size), outlets.run)
            sender.finish()
            served = True
            if state.counters.evicted != evicted:
                deliveries.settle()
            room = deliveries.room()
            if room <= 0:
                break
        return served

    def _send(self, frames: list[bytes]) -> None:
        try:
            send_frames(self.socket, frames)
        except zmq.ZMQError:
            pass  # gone or not reading: an answer is not owed

    def _error(self, routing_id: bytes, text: str) -> None:
        log.debug("consume_request_refused", reason=text)
        self._send(consume_wire.encode_error(routing_id, text))

    # -- consumers leaving, expiry ------------------------------------------------

    def _gone(self, consumer: ServedConsumer, reason: str) -> None:
        """Give back what the consumer holds, at once."""
        if self.consumers.pop(consumer.routing_id, None) is None:
            return
        deliveries = consumer.group
        deliveries.consumers.remove(consumer)
        given_back = deliveries.give_back_held(consumer)
        log.info("consumer_left", topic=deliveries.topic, group=deliveries.name,
                 reason=reason, given_back=given_back)

    def tick(self, mono: float) -> None:
        """What consumers whose connection went held is given back."""
        for consumer, reason in self.liveness.tick(mono, list(self.consumers.values())):
            self._gone(consumer, reason)

    def reap(self, now_us: int) -> None:
        """Expired deliveries back, overdue at the consumer that let them expire (a
        takeover's states are reaped with it); each group's floor raised (so a
        restart reads on from where the group is, not from its start)."""
        for deliveries in self.groups.values():
            self.answers.reap(deliveries, now_us)
            held = self.held.lowest()
            floor = deliveries.state.lowest_open()
            self.topics.counts.raise_floor(deliveries.group, floor if held is None
                                    else min(floor, held))
