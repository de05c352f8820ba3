"""The consumers of one group and who holds which of its deliveries, on either
endpoint: ``default`` on --send-dsn, a named group of a topic on --consume-dsn.

A group's messages come from its own delivery state (this node's messages it holds)
and, while this node has taken over down nodes, from each one's state for the group
of the same name. Deliveries are keyed by origin node id and seq, as the message key
``<node id>-<seq hex>`` names them, so ACKs and NACKs reach the right state: both in
one int (``GroupDelivery.key_of``). The node's own messages, nearly all of them, are
keyed by the seq alone, so a run's keys are its seqs as they are (no int made a
delivery, small ints hashed); a taken-over origin's are its node id's number plus one
above the seq's 64 bits.

A delivery whose ack deadline passed goes to another consumer of the group first,
and keeps its credit spent at the consumer that let it expire until that one answers
it (a late ACK or NACK) or leaves: a consumer that is stuck soon gets nothing more,
one that is slow gets as much as it answers. The consumers on --send-dsn are one
pool the node cannot tell apart (a DEALER): nothing is held against the pool, whose
window (pzq.delivery.window) shrinks instead.

Who holds a delivery is its consumer's ``held`` set alone (no table of owners beside
it, which cost a dict entry a delivery from its send to its ACK): a key is held by one
consumer at most, and an answer looks first at the consumer that sent it, which
nearly always holds it, then at the group's others. A run sent in one BATCH is held as
its list of keys (``hold_run``), put in the set only when something asks it of one
key or walks it; an ACK of just that run lets it go in one step (``let_go_run``), with
no set insert and delete a delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

from pzq.delivery.state import DeliveryState
from pzq.protocol.consume import ACK
from pzq.protocol.message_keys import KeyNumbers
from pzq.rates import LatencyWindow
from pzq.store.topics import Group

Key = int  # the seq (own messages), or a taken-over origin's number + 1 above it: key_of
SEQ_BITS = 64
SEQ_MASK = (1 << SEQ_BITS) - 1
# an ACK of the keys last sent to a consumer, as ack_many sends it: the frame, the
# keys' node id as a number and their seqs
SentKeys = tuple[bytes, int, list[int]]
TakenOver = Callable[[str, str], dict[bytes, DeliveryState]]  # topic, group -> by origin
Origins = Callable[[], dict[bytes, DeliveryState]]  # a group's taken-over states


def ms_until(due_us: int, now_us: int) -> int:
    """A poll timeout that ends when ``due_us`` (wall clock) comes."""
    return max(0, -((now_us - due_us) // 1000))


def soonest_due_ms(groups: Iterable[GroupDelivery], now_us: int, wait: int | None
                   ) -> int | None:
    """``wait`` (ms, None: none), or sooner: when the first delayed delivery of
    ``groups`` is due (only states holding some are asked)."""
    for deliveries in groups:
        for state in deliveries.every_state():
            if state.delayed and (due := state.next_due_us()) is not None:
                due_wait = ms_until(due, now_us)
                wait = due_wait if wait is None else min(wait, due_wait)
    return wait


@dataclass(eq=False)
class ServedConsumer:
    """A consumer as the node serves it: one connection on --consume-dsn, or the pool
    of --send-dsn's (the Python client is pzq.client.Consumer)."""

    routing_id: bytes
    group: GroupDelivery
    window: int
    last_heard: float  # when it last sent a request (how long it has been idle)
    # the keys it holds, but for the runs' below (``held``: every key, in one set)
    held_alone: set[Key] = field(default_factory=set)
    overdue: set[Key] = field(default_factory=set)  # expired here, not answered: credit spent
    # the frames before every delivery to it, built once (--consume-dsn: routing id,
    # DELIVER or BATCH, topic, group; --send-dsn: none)
    head: list[bytes] = field(default_factory=list)
    unreachable: bool = False  # a send found its connection gone: nothing more to it
    confirm: bool = False  # CONFIRM:1: its ACKs are answered ACKED once written
    batches: bool = False  # protocol 2: deliveries in BATCH messages
    # the consumers on --send-dsn: the socket picks one, the window bounds what is out,
    # so neither credits nor holders are kept per delivery
    pool: bool = False
    key: str = ""  # its CURVE key, with --authorization (its rights looked at again)
    sent: SentKeys | None = None  # the last piece of a run it was sent, as its ACK is
    # runs it holds whole, each its keys as sent (in no other consumer's hands, none in
    # ``held_alone``), oldest first; and how many keys they hold
    held_runs: list[list[Key]] = field(default_factory=list)
    held_in_runs: int = 0

    @property
    def held(self) -> set[Key]:
        """Every key it holds, in one set (the runs held put in it first: for a look at
        one key, a change of one, a walk)."""
        if self.held_runs:
            alone = self.held_alone
            for run in self.held_runs:
                alone.update(run)
            self.held_runs = []
            self.held_in_runs = 0
        return self.held_alone

    @property
    def held_count(self) -> int:
        """How many keys it holds (``len(held)``, the runs not put in the set)."""
        return len(self.held_alone) + self.held_in_runs

    def hold_run(self, keys: list[Key]) -> None:
        """It holds these keys now, none held before by anyone (a run's first deliveries:
        the list kept as it is, not to be changed by the caller)."""
        if keys:
            self.held_runs.append(keys)
            self.held_in_runs += len(keys)

    def let_go_run(self, keys: list[Key]) -> bool:
        """It is done with ``keys`` if they are just a run it holds, the same keys in the
        same order (an ACK of a BATCH as sent): the run goes in one step. False: they are
        not (nothing changed)."""
        count = len(keys)
        for at, run in enumerate(self.held_runs):
            if len(run) == count and run == keys:  # (the read's int objects: by identity)
                del self.held_runs[at]
                self.held_in_runs -= count
                return True
        return False

    @property
    def room(self) -> int:
        return 0 if self.unreachable else \
            self.window - len(self.held_alone) - self.held_in_runs - len(self.overdue)

    def numbers_if_sent(self, frames: list[bytes]) -> KeyNumbers | None:
        """An ACK (``frames``: its verb and its keys' frame) of just the keys last sent
        to it, byte for byte as ``ack_many`` names them: their numbers as
        ``consume.ack_key_numbers`` reads them, without the read; None for any other."""
        sent = self.sent
        if sent is None or len(frames) != 2 or frames[1] != sent[0] or frames[0] != ACK:
            return None
        seqs = sent[2]
        return (sent[1],) * len(seqs), tuple(seqs)

    def idle_seconds(self, mono: float) -> float:
        """Since it last sent a request (a hung consumer grows here)."""
        return round(max(0.0, mono - self.last_heard), 3)


class GroupDelivery:
    """One group: its delivery states, its consumers, and who holds what."""

    def __init__(self, name: str, state: DeliveryState, taken_over: Origins,
                 latency: LatencyWindow, topic: str = "") -> None:
        self.name = name
        self.topic = topic  # "": ``default``, which reads every topic
        self.state = state  # this node's own messages
        self.own_id = state.area.node_id
        self.own_number = int(self.own_id, 16)
        self.counters = state.counters
        self._taken_over = taken_over
        self.latency = latency  # from delivery to ACK
        self.consumers: list[ServedConsumer] = []
        self._turn = 0
        # every_state's and sources' answer while the group has no other origin (nearly
        # always): one list kept, not one built a wake (callers do not change it)
        self._own_only = [state]

    def base_of(self, number: int) -> int:
        """The held keys of the origin whose node id is ``number`` are this ``|`` each
        seq: 0 for the own (its keys are the seqs), the number plus one above the seq's
        bits for another (so a node id of 0 is told from the own)."""
        return 0 if number == self.own_number else (number + 1) << SEQ_BITS

    def base_for(self, node_id: bytes) -> int:
        return 0 if node_id == self.own_id else (int(node_id, 16) + 1) << SEQ_BITS

    def keys_of(self, node_id: bytes, seqs: list[int]) -> list[Key]:
        """The held keys of ``seqs`` of one origin: the own's are the list itself (not
        to be changed by the caller)."""
        if node_id == self.own_id:
            return seqs
        return list(map(self.base_for(node_id).__or__, seqs))

    def key_of(self, node_id: bytes, seq: int) -> Key:
        return seq if node_id == self.own_id else (int(node_id, 16) + 1) << SEQ_BITS | seq

    def origin_of(self, key: Key) -> bytes:
        """The node id of a held key's origin (as the message key writes it)."""
        number = key >> SEQ_BITS
        return self.own_id if number == 0 else b"%08x" % (number - 1)

    def taken_over(self) -> dict[bytes, DeliveryState]:
        """Down nodes' messages this group gets here, by origin."""
        return self._taken_over()

    def every_state(self) -> list[DeliveryState]:
        """The own state first, then each other origin's (the list not to be changed)."""
        others = self._taken_over()
        return [self.state, *others.values()] if others else self._own_only

    def state_for(self, origin: bytes) -> DeliveryState | None:
        if origin == self.state.area.node_id:
            return self.state
        return self._taken_over().get(origin)

    def sources(self, own_allowed: bool,
                states: list[DeliveryState] | None = None) -> list[DeliveryState]:
        """What to deliver from: own messages first (once the cluster lets us), then
        taken-over ones while their origin is down (``states``: every_state's, asked
        already)."""
        if states is None:
            states = self.every_state()
        if states is self._own_only:  # (no other origin: the kept list, or none)
            return states if own_allowed else []
        taken = [state for state in states[1:] if not state.paused]
        return ([self.state] if own_allowed else []) + taken

    def room(self) -> int:
        room = 0
        for consumer in self.consumers:
            if (credit := consumer.room) > 0:
                room += credit
        return room

    def next_consumers(self) -> list[ServedConsumer]:
        """Consumers with credit, starting after the last one served."""
        consumers = self.consumers
        if len(consumers) == 1:  # (a group of one consumer: no turn to take)
            self._turn = 0
            return consumers[:] if consumers[0].room > 0 else []
        count = len(consumers)
        self._turn = (self._turn + 1) % max(1, count)
        ordered = consumers[self._turn:] + consumers[:self._turn]
        return [consumer for consumer in ordered if consumer.room > 0]

    def give_back_held(self, consumer: ServedConsumer) -> int:
        """What the consumer holds goes again at once (it left); returns how many."""
        held = sorted(consumer.held)
        consumer.held.clear()
        for key in held:
            state = self.state_for(self.origin_of(key))
            if state is not None:
                state.nack(key & SEQ_MASK)
        return len(held)

    def holder_of(self, key: Key, likely: ServedConsumer | None = None
                  ) -> ServedConsumer | None:
        """The consumer that holds the delivery (``likely`` looked at first). (Its set
        read as it is where it holds no run: a delivery sent alone and its answer make
        no call for it.)"""
        if likely is not None and key in (likely.held if likely.held_runs
                                          else likely.held_alone):
            return likely
        return next((consumer for consumer in self.consumers if key in consumer.held), None)

    def holders(self) -> dict[Key, ServedConsumer]:
        """Every held key and its consumer (a walk of every set: for figures and tests)."""
        return {key: consumer for consumer in self.consumers for key in consumer.held}

    def release(self, key: Key, likely: ServedConsumer | None = None) -> None:
        """Whoever holds the delivery holds it no more (``likely`` looked at first)."""
        holder = self.holder_of(key, likely)
        if holder is not None:  # (found in its set: the runs it held are in it now)
            holder.held_alone.discard(key)

    def let_go(self, keys: list[Key], likely: ServedConsumer) -> None:
        """Whoever holds these deliveries now is done with them: the consumer that
        answered them, nearly always, in one step (a run it holds whole, in fewer); if it
        did not hold every one (one expired there and went to another; a key given
        twice), the others' sets too."""
        if likely.held_runs and likely.let_go_run(keys):
            return
        held = likely.held
        before = len(held)
        held.difference_update(keys)
        if before - len(held) == len(keys):
            return
        for consumer in self.consumers:
            if consumer is not likely and consumer.held_count:
                consumer.held.difference_update(keys)

    def settle(self, expired: bool = False) -> None:
        """Forget holders of deliveries the states took back: evicted, or ``expired``
        (after a reap), which stay overdue at the consumer that let them expire."""
        states: dict[int, DeliveryState | None] = {}  # by origin (as a number)
        for consumer in self.consumers:
            gone = []
            for key in consumer.held:
                number = key >> SEQ_BITS
                if number in states:
                    state = states[number]
                else:
                    state = states[number] = self.state_for(self.origin_of(key))
                if state is None or key & SEQ_MASK not in state.inflight:
                    gone.append(key)
                    if expired and state is not None and not state.paused and not consumer.pool:
                        consumer.overdue.add(key)
            consumer.held.difference_update(gone)

    def any_overdue(self) -> bool:
        for consumer in self.consumers:  # (a loop: no generator made a pass)
            if consumer.overdue:
                return True
        return False

    def shares_reads(self) -> bool:
        """Whether other groups read the same messages (what one made, the others use)."""
        return False


class NamedGroupDelivery(GroupDelivery):
    """A named group of a topic, on --consume-dsn."""

    def __init__(self, group: Group, state: DeliveryState, taken_over: TakenOver) -> None:
        topic = group.topic.name
        super().__init__(group.name, state, partial(taken_over, topic, group.name),
                         LatencyWindow(), topic)
        self.group = group
        self.topic_frame = topic.encode()
        self.group_frame = group.name.encode()

    def shares_reads(self) -> bool:
        return len(self.group.topic.groups) > 1

    def lag(self) -> int:
        """Not yet delivered since the start (Redis's lag): the backlog less what is out
        or waiting to go again."""
        state = self.state
        return max(0, self.group.backlog - len(state.inflight) - len(state.ready)
                   - len(state.delayed))
