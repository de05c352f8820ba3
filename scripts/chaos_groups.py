#!/usr/bin/env python3
"""A soak of consumer groups: producers send to one topic that several named groups
read, while nodes are SIGKILLed and restarted and group consumers fail.

The topic (``orders``) is read by the groups named by ``--groups`` only (``default``
is removed from it). Each node serves every group three consumers: one ACKs each
message at once, one holds each for up to two seconds before ACKing, one ACKs
shuffled batches with ``ack_many``; every consumer NACKs a few. A consumer fault
closes a consumer abruptly (its context destroyed with linger 0, no BYE: to the
node, a killed process) and starts a new one. In a cluster (``--nodes 3``) a killed
node stays down, in half the kills, until a peer took its messages over, so the
survivors serve its groups to the consumers there.

At the end, per group: every message ACKed "1" to a producer (with or without
REPLICATION_FAILED) was delivered to the group at least once (lost must be 0);
every duplicate is explained by something that came before it (a NACK, an ACK after
the deadline, a consumer fault or a node fault while the message was out or its
ACK was fresh) and their number stays within the bound the faults allow (the
windows of the consumers they hit); and once every group ACKed everything, every
node's store and every peer's copies are empty (STATS). The nodes send delivery
counts (--delivery-headers): a delivery again whose count did not grow is counted
by where the delivery before it and this one came from (the message's origin or a
survivor that took it over), as are those that came again with count 1. One that
did not grow on the origin both times must be a delivery of the node's last wake
before a kill (its marks are written with the next wake's batch): the earlier
delivery reached its consumer less than WAKE_BOUND_SECONDS before the SIGKILL was
sent (a wake's deliveries were written 7 ms later at the 99th percentile, 186 ms at
most, in 27 runs of this soak; a quiet node waits up to the reaper's 200 ms for its
next wake), else the soak fails. Every such count of those runs came at most
2 ms before its kill (see docs/development.rst). Run it with the project's
environment:

    .venv/bin/python scripts/chaos_groups.py --seconds 300 --kills 20 --consumer-faults 40
    .venv/bin/python scripts/chaos_groups.py --nodes 3 --replicas 2 --seconds 300 \\
        --kills 20 --consumer-faults 40
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import random
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for chaos
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from chaos import NO_MODES, Faults, Nodes, StoreModes, Unavailable, produce_for, store_modes  # noqa: E402
from chaos_shared import (  # noqa: E402
    SoakConsumer,
    declare_groups,
    kill_and_restart,
    report_and_exit,
    soak_parser,
    store_left,
)

from pzq.bench.nodes import wait_until  # noqa: E402
from pzq.client import GroupConsumer, Message  # noqa: E402
from pzq.clock import Now  # noqa: E402
from pzq.errors import ExitCode  # noqa: E402
from pzq.protocol.message_keys import parse_message_key  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402
from tests.support.partition_cluster import ClusterTimings  # noqa: E402

TOPIC = "orders"
STYLES = ("at_once", "holding", "batching")
WINDOW = 50  # each group consumer's window: what one fault can catch out
HOLD_SECONDS = 2.0  # the holding consumer ACKs after 0 to this many seconds
BATCH_SECONDS = 0.5  # a batch is ACKed once this old, or once full
NACK_SHARE = 0.02
# An ACK sent this shortly before a node fault may not have reached the node, or the
# holders of the message's copies, when the node went down.
ACK_SETTLE_SECONDS = 2.0
LATE_MARGIN_US = 300_000  # the reaper's period and then some: an ACK this close is late
ACK_TIMEOUT_US = 5_000_000  # longer than any hold: a held message does not expire
NODE_ARGS = ["--ack-timeout", str(ACK_TIMEOUT_US), "--reaper-frequency", "200000",
             "--delivery-headers"]
TIMINGS = ClusterTimings(timeout_nodes_us=1_000_000, ack_timeout_us=ACK_TIMEOUT_US,
                         timeout_replication_us=500_000, reaper_frequency_us=200_000)
NACK, LATE_ACK, CONSUMER_FAULT, NODE_FAULT = "NACK", "late ACK", "consumer fault", "node fault"
STORY_SECONDS = 30.0  # how long a body's deliveries and answers are kept for its story
# A node forgets the first-delivery marks and counts of its last wake's deliveries
# when it is killed (they are written with the next batch): a count that did not
# grow on the origin is inside that window if its earlier delivery reached the
# consumer less than this before the kill (measured: see the docstring).
WAKE_BOUND_SECONDS = 0.25
# how often a node tells its peers how far its groups' first deliveries went
HEARTBEAT_SECONDS = min(1.0, TIMINGS.timeout_nodes_us / 4e6)
CLUSTER_EVENTS = ("peer_down", "peer_up", "takeover_started", "takeover_stopped",
                  "takeover_resumed")  # the nodes' log events a story shows


@dataclass
class GroupFigures:
    group: str
    acked: int = 0  # messages ACKed "1" to producers
    delivered: int = 0  # distinct messages delivered to the group
    lost: int = 0
    duplicates: int = 0  # deliveries beyond the first
    explained: dict[str, int] = field(default_factory=dict)  # duplicates by cause
    unexplained: int = 0
    bound: int = 0  # the most duplicates the NACKs, late ACKs and faults allow
    refused_answers: int = 0  # ACKs and NACKs the node answered with ERROR
    # deliveries again whose DELIVERY count did not grow, by where the one before and
    # this one came from ("origin>survivor": the origin's delivery, then a survivor's)
    count_not_grown: dict[str, int] = field(default_factory=dict)
    count_one_again: int = 0  # of those, the ones that came again with DELIVERY:1
    # of those on the origin both times, how long before the node's kill the earlier
    # delivery reached its consumer (s; below 0: it came after the kill was sent)
    kill_gaps: list[float] = field(default_factory=list)
    count_beyond_wake: int = 0  # ... those that came WAKE_BOUND_SECONDS or more before
    beyond_stories: list[str] = field(default_factory=list)  # ... and their stories
    # the same of origin>survivor with DELIVERY:1 (the survivor did not know the
    # origin had delivered it: a figure, as the protocol allows a heartbeat's
    # deliveries, or more, there; one it knew of comes with 2, whatever the origin's)
    survivor_kill_gaps: list[float] = field(default_factory=list)
    # ... the stories of those more than a heartbeat and a wake before the kill
    survivor_stories: list[str] = field(default_factory=list)
    # each unexplained duplicate's story: its body's deliveries and answers, with the
    # faults and the nodes' cluster events around them (seconds from its first delivery)
    stories: list[str] = field(default_factory=list)


@dataclass
class GroupsReport:
    nodes: int
    replicas: int
    seconds: float
    produced: int = 0
    acked: int = 0
    replication_failed: int = 0
    refused: int = 0
    restarts: int = 0
    takeovers_awaited: int = 0  # kills whose node stayed down until a peer took over
    consumer_faults: int = 0
    store_left: dict[str, int] = field(default_factory=dict)  # messages and copies at the end
    groups: list[GroupFigures] = field(default_factory=list)

    def failed(self) -> bool:
        return any(figures.lost or figures.unexplained or figures.duplicates > figures.bound
                   or figures.count_beyond_wake
                   for figures in self.groups) or any(self.store_left.values())


@dataclass
class Outstanding:
    """A message out with a consumer of a group: delivered, not yet ACKed or NACKed."""

    consumer: int
    node: int
    origin: bytes
    deadline_us: int  # after it the node may give the message out again
    deliveries: int | None = None  # its DELIVERY count
    at: float = field(default_factory=time.monotonic)  # when it reached the consumer


@dataclass(frozen=True)
class Ack:
    """An ACK a consumer gave: when (monotonic), to which node, for whose message."""

    at: float
    node: int
    origin: bytes


@dataclass
class Life:
    """The end of one of a node's lives: when it was sent its SIGKILL (monotonic), when
    it was back (None: not yet)."""

    killed: float
    back: float | None = None


class GroupLedger:
    """What one group was given and answered, and why each body may come again."""

    def __init__(self, name: str, node_ids: Sequence[bytes]) -> None:
        self.name = name
        self.node_ids = list(node_ids)
        self.deliveries: Counter[bytes] = Counter()
        self.last_count: dict[bytes, Outstanding] = {}  # the last delivery with a count
        self.count_not_grown: Counter[str] = Counter()
        self.count_one_again = 0
        self.lives: defaultdict[int, list[Life]] = defaultdict(list)  # each node's ends
        self.kill_gaps: list[float] = []
        self.survivor_kill_gaps: list[float] = []
        self.survivor_stories: list[str] = []
        self.count_beyond_wake = 0
        self.beyond_stories: list[str] = []
        self.out: dict[bytes, Outstanding] = {}
        self.fresh_acks: dict[bytes, Ack] = {}
        # ACKs given while a node was down: what they tell it can only go once it is back
        self.acks_in_outage: dict[int, dict[bytes, Ack]] = {}
        self.excuses: defaultdict[bytes, list[str]] = defaultdict(list)
        self.explained: Counter[str] = Counter()
        self.unexplained = 0
        self.bound = 0
        self.history: dict[bytes, list[tuple[float, str]]] = {}  # the last STORY_SECONDS'
        self._recorded: deque[tuple[float, bytes]] = deque()
        self.events: deque[tuple[float, str]] = deque()  # faults and cluster events
        self.stories: list[str] = []

    def record(self, body: bytes, text: str) -> None:
        """A step in the body's story; what is older than STORY_SECONDS is let go."""
        now = time.monotonic()
        self.history.setdefault(body, []).append((now, text))
        self._recorded.append((now, body))
        while self._recorded[0][0] < now - STORY_SECONDS:
            _, old = self._recorded.popleft()
            steps = self.history.get(old)
            if steps is not None and steps[-1][0] < now - STORY_SECONDS:
                del self.history[old]
        while self.events and self.events[0][0] < now - 2 * STORY_SECONDS:
            self.events.popleft()

    def event(self, text: str) -> None:
        self.events.append((time.monotonic(), text))

    def story(self, body: bytes) -> str:
        steps = self.history.get(body, [])
        first, last = (steps[0][0], steps[-1][0]) if steps else (0.0, 0.0)
        told = sorted(steps + [(at, text) for at, text in self.events
                               if first - STORY_SECONDS / 3 <= at <= last])
        return "\n".join([f"{self.name} {body!r}:",
                          *(f"  {at - first:+8.3f} {text}" for at, text in told)])

    def delivered(self, body: bytes, held: Outstanding) -> None:
        where = "origin" if self.node_ids[held.node] == held.origin else "survivor"
        self.record(body, f"delivered by node{held.node} ({where}) to consumer "
                          f"{held.consumer}, count {held.deliveries}, deadline in "
                          f"{(held.deadline_us - time.time() * 1e6) / 1e6:.2f} s")
        self.deliveries[body] += 1
        if self.deliveries[body] > 1:
            self._explain(body)
        self._count(body, held)
        self.out[body] = held

    def _count(self, body: bytes, held: Outstanding) -> None:
        """A delivery count that did not grow since the body's last delivery; on the
        origin both times, how long before the node's kill the earlier one came."""
        if held.deliveries is None:
            return
        where = self._where(held)
        before = self.last_count.get(body)
        if before is not None and before.deliveries is not None \
                and held.deliveries <= before.deliveries:
            was = self._where(before)
            self.count_not_grown[f"{was}>{where}"] += 1
            self.count_one_again += held.deliveries == 1
            if was == where == "origin":
                self._measure_kill_gap(body, before)
            elif was == "origin" and held.deliveries == 1 \
                    and (gap := self._kill_gap(before)) is not None:
                self.survivor_kill_gaps.append(gap)
                if gap >= HEARTBEAT_SECONDS + WAKE_BOUND_SECONDS:
                    self.survivor_stories.append(
                        f"{self.story(body)}\n  (count not grown: the origin's delivery "
                        f"came {gap:.3f} s before its kill)")
        self.last_count[body] = held

    def _where(self, held: Outstanding) -> str:
        return "origin" if self.node_ids[held.node] == held.origin else "survivor"

    def _measure_kill_gap(self, body: bytes, before: Outstanding) -> None:
        """The origin forgot a delivery's count (or its first-delivery mark): the
        protocol allows it for a delivery of the last wake before a kill. The kill that
        ended the node's life which made the earlier delivery: the first whose return
        came after it (a delivery on its way when the kill was sent still reaches the
        consumer: a gap below 0). No kill: the node forgot while it ran."""
        gap = self._kill_gap(before)
        if gap is not None and gap < WAKE_BOUND_SECONDS:
            self.kill_gaps.append(gap)
            return
        self.count_beyond_wake += 1
        when = (f"{gap:.3f} s before its node was killed" if gap is not None
                else "with no kill of its node after it")
        self.beyond_stories.append(f"{self.story(body)}\n  (count not grown: the earlier "
                                   f"delivery came {when})")

    def _kill_gap(self, delivery: Outstanding) -> float | None:
        """Seconds from the delivery's arrival to the SIGKILL that ended its node's
        life (the first kill whose node was back after the delivery, or is not yet;
        below 0: the delivery was on its way); None: no kill of it since."""
        ends = [life.killed for life in self.lives[delivery.node]
                if life.back is None or life.back > delivery.at]
        return ends[0] - delivery.at if ends else None

    def killed(self, node: int, at: float) -> None:
        """Node ``node`` was sent its SIGKILL at ``at`` (monotonic)."""
        self.lives[node].append(Life(at))

    def back(self, node: int, at: float) -> None:
        self.lives[node][-1].back = at

    def _explain(self, body: bytes) -> None:
        excuses = self.excuses.get(body)
        if excuses:
            self.explained[excuses.pop(0)] += 1
            return
        earlier = self.out.get(body)
        if earlier is not None and earlier.deadline_us < time.time() * 1e6 + LATE_MARGIN_US:
            self.explained[LATE_ACK] += 1  # expired before its consumer ACKed it
            self.bound += 1
        else:
            self.unexplained += 1
            self.stories.append(self.story(body))

    def answered(self, body: bytes, ok: bool, node: int, late: bool) -> None:
        held = self.out.pop(body, None)
        self.record(body, f"{'ACK' if ok else 'NACK'} to node{node}{' (late)' if late else ''}")
        if not ok:
            self._excuse(body, NACK, 1)
        elif late:
            self._excuse(body, LATE_ACK, 1)
        elif held is not None:
            self.fresh_acks[body] = Ack(time.monotonic(), node, held.origin)
            for acks in self.acks_in_outage.values():
                acks[body] = self.fresh_acks[body]

    def consumer_fault(self, consumer: int) -> None:
        self.event(f"consumer {consumer} closed abruptly")
        for body in [body for body, held in self.out.items() if held.consumer == consumer]:
            del self.out[body]
            self.excuses[body].append(CONSUMER_FAULT)
        self.bound += WINDOW

    def node_fault(self, node: int, origin: bytes, consumers: int, killed: bool) -> None:
        """Node ``node`` (id ``origin``) was killed or came back: what is out with it
        or is its message, and what was ACKed to it or is its message lately, may come
        again. A killed node may also hold copies of any other node's messages: those
        out now, or ACKed lately, may miss their marks there and come again if their
        origin dies before it told the node. An ACK given while a node was down counts
        as given when it returns: only then can what it says reach that node."""
        now = time.monotonic()
        self.event(f"node{node} {'killed' if killed else 'back'}")
        self.fresh_acks = {body: ack for body, ack in self.fresh_acks.items()
                           if ack.at >= now - ACK_SETTLE_SECONDS}
        caught = [body for body, held in self.out.items()
                  if killed or held.node == node or held.origin == origin]
        caught += [body for body, ack in self.fresh_acks.items()
                   if killed or ack.node == node or ack.origin == origin]
        for body in caught:
            self.excuses[body].append(NODE_FAULT)
        self.bound += WINDOW * consumers
        if killed:
            self.acks_in_outage[node] = {}
        else:  # what the others owe it starts to flow now
            for body, ack in self.acks_in_outage.pop(node, {}).items():
                self.fresh_acks[body] = Ack(now, ack.node, ack.origin)

    def _excuse(self, body: bytes, cause: str, allowance: int) -> None:
        self.excuses[body].append(cause)
        self.bound += allowance

    def figures(self, acked: set[bytes], refused_answers: int) -> GroupFigures:
        return GroupFigures(
            self.name, acked=len(acked), delivered=len(self.deliveries),
            lost=len(acked - self.deliveries.keys()),
            duplicates=sum(count - 1 for count in self.deliveries.values()),
            explained=dict(self.explained), unexplained=self.unexplained, bound=self.bound,
            refused_answers=refused_answers, count_not_grown=dict(self.count_not_grown),
            count_one_again=self.count_one_again, kill_gaps=sorted(self.kill_gaps),
            survivor_kill_gaps=sorted(self.survivor_kill_gaps),
            survivor_stories=list(self.survivor_stories),
            count_beyond_wake=self.count_beyond_wake,
            beyond_stories=list(self.beyond_stories), stories=list(self.stories))


class Ledgers:
    """Every group's ledger behind one lock (the consumers are threads)."""

    def __init__(self, groups: Sequence[str], node_ids: Sequence[bytes]) -> None:
        self.lock = threading.Lock()
        self.groups = {name: GroupLedger(name, node_ids) for name in groups}


class GroupWorker(SoakConsumer):
    """One consumer of one group on one node, in one style, started again after each
    fault it is given."""

    def __init__(self, number: int, ledgers: Ledgers, group: str, node: int, dsn: str,
                 style: str, seed: int) -> None:
        super().__init__(number, group, node, dsn, seed)
        self.ledgers, self.style = ledgers, style
        self.fault_asked = threading.Event()
        self.faults = 0
        self.refused_answers = 0

    def _one_consumer(self) -> None:
        joined = self.joined(TOPIC, WINDOW)
        if joined is None:
            return
        consumer, context = joined
        held: list[tuple[float, Message]] = []
        while not (self.stopping.is_set() or self.fault_asked.is_set()):
            message = consumer.receive(0.05)
            if message is not None:
                self._take(consumer, message, held)
            held = self._answer_due(consumer, held, time.monotonic())
        self.refused_answers += len(consumer.errors)
        if self.fault_asked.is_set():
            self._fail(context)
        else:
            self._answer(consumer, [message for _, message in held], True)
            consumer.close()
            context.term()

    def _take(self, consumer: GroupConsumer, message: Message,
              held: list[tuple[float, Message]]) -> None:
        origin, _ = parse_message_key(message.key)
        with self.ledgers.lock:
            self.ledgers.groups[self.group].delivered(
                message.parts[0], Outstanding(self.number, self.node, origin,
                                              message.deadline_us, message.deliveries))
        now = time.monotonic()
        if self.rng.random() < NACK_SHARE:
            self._answer(consumer, [message], False)
        elif self.style == "at_once":
            self._answer(consumer, [message], True)
        elif self.style == "holding":
            held.append((now + self.rng.uniform(0, HOLD_SECONDS), message))
        else:
            held.append((now + BATCH_SECONDS, message))

    def _answer_due(self, consumer: GroupConsumer, held: list[tuple[float, Message]],
                    now: float) -> list[tuple[float, Message]]:
        """ACK what is due; a batch goes whole, shuffled, once its oldest is due."""
        if self.style == "batching":
            if held and (held[0][0] <= now or len(held) >= WINDOW // 2):
                batch = [message for _, message in held]
                self.rng.shuffle(batch)
                self._answer(consumer, batch, True)
                return []
            return held
        due = [message for at, message in held if at <= now]
        self._answer(consumer, due, True)
        return [(at, message) for at, message in held if at > now]

    def _answer(self, consumer: GroupConsumer, messages: list[Message], ok: bool) -> None:
        if not messages:
            return
        late_after_us = time.time() * 1e6 + LATE_MARGIN_US
        with self.ledgers.lock:  # before the answer leaves: a redelivery may come at once
            ledger = self.ledgers.groups[self.group]
            for message in messages:
                ledger.answered(message.parts[0], ok, self.node,
                                message.deadline_us < late_after_us)
        if ok:
            consumer.ack_many(messages)
        else:
            consumer.nack_many(messages)

    def _fail(self, context: zmq.Context) -> None:  # type: ignore[type-arg]
        with self.ledgers.lock:  # before the node can notice and give its messages out
            self.ledgers.groups[self.group].consumer_fault(self.number)
        context.destroy(linger=0)  # no BYE: to the node, a killed process
        self.faults += 1
        self.fault_asked.clear()

    def fail_now(self, timeout: float = 10.0) -> None:
        """Have this consumer closed abruptly and started again; returns once it was."""
        before = self.faults
        self.fault_asked.set()
        wait_until(lambda: self.faults > before or self.error is not None, timeout,
                   message=f"consumer {self.number} failed on request")


class Chaos:
    """The nodes, the group consumers and the faults of one run."""

    def __init__(self, nodes: Nodes, groups: Sequence[str], report: GroupsReport,
                 seed: int) -> None:
        self.nodes, self.report = nodes, report
        self.node_ids = declare_groups(nodes, TOPIC, groups)
        self.ledgers = Ledgers(groups, self.node_ids)
        self.workers = [
            GroupWorker(number, self.ledgers, group, node, member.consume_dsn, style,
                        seed * 1000 + number)
            for number, (group, (node, member), style) in enumerate(
                (group, placed, style) for group in groups
                for placed in enumerate(nodes.members) for style in STYLES)]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        threading.Thread(target=self._watch_cluster_events, daemon=True).start()

    def _watch_cluster_events(self) -> None:
        """The nodes' cluster events (a peer down, a takeover), for the stories: a node
        a peer found silent, not killed, shows here only."""
        names = {node_id.decode(): f"node{index}" for index, node_id in enumerate(self.node_ids)}
        read: dict[int, tuple[int, int]] = {}  # node -> (its event list, how far read)
        while True:
            for index, member in enumerate(self.nodes.members):
                events = member.events  # a new list at each start
                seen, done = read.get(index, (0, 0))
                new = events[done if id(events) == seen else 0:]
                for event in new:
                    if event.get("event") in CLUSTER_EVENTS:
                        about = str(event.get("origin") or event.get("node_id"))
                        self._event(f"node{index} logs {event['event']} "
                                    f"{names.get(about, about)}")
                read[index] = (id(events), (done if id(events) == seen else 0) + len(new))
            time.sleep(0.05)

    def consumer_fault(self, node: int, rng: random.Random) -> None:
        rng.choice(self.workers).fail_now()

    def kill_and_restart(self, index: int, rng: random.Random) -> None:
        def killed(signalled: Now) -> None:
            self._life(index, signalled.mono, killed=True)
            self._node_fault(index, killed=True)

        def taken(came: bool) -> None:
            self.report.takeovers_awaited += came
            self._event(f"node{index} taken over")

        def back(now: Now) -> None:
            self._life(index, now.mono, killed=False)
            self._node_fault(index, killed=False)

        kill_and_restart(self.nodes, self.node_ids, index, rng, killed, back, taken)

    def _life(self, index: int, at: float, killed: bool) -> None:
        with self.ledgers.lock:
            for ledger in self.ledgers.groups.values():
                (ledger.killed if killed else ledger.back)(index, at)

    def _event(self, text: str) -> None:
        with self.ledgers.lock:
            for ledger in self.ledgers.groups.values():
                ledger.event(text)

    def _node_fault(self, index: int, killed: bool) -> None:
        consumers = len(self.nodes.members) * len(STYLES)  # of each group
        with self.ledgers.lock:
            for ledger in self.ledgers.groups.values():
                ledger.node_fault(index, self.node_ids[index], consumers, killed)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stopping.set()
        for worker in self.workers:
            worker.join(10)

    def errors(self) -> list[BaseException]:
        return [worker.error for worker in self.workers if worker.error is not None]

    def delivered_all(self, acked: set[bytes]) -> bool:
        with self.ledgers.lock:
            return all(acked <= ledger.deliveries.keys()
                       for ledger in self.ledgers.groups.values())

    def store_left(self) -> dict[str, int]:
        """Messages and copies still stored, per node (-1: the node did not answer)."""
        return store_left(self.nodes)

    def figures(self, acked: set[bytes]) -> list[GroupFigures]:
        refused: Counter[str] = Counter()
        for worker in self.workers:
            refused[worker.group] += worker.refused_answers
        with self.ledgers.lock:
            return [ledger.figures(acked, refused[name])
                    for name, ledger in self.ledgers.groups.items()]


def run(nodes_count: int = 1, seconds: float = 10.0, kills: int = 2,
        consumer_faults: int = 4, replicas: int = 1, groups: Sequence[str] = ("billing", "audit"),
        rate: float = 400.0, seed: int = 1, drain_timeout: float = 60.0,
        directory: Path | None = None, at_least: int = 0,
        modes: StoreModes = NO_MODES) -> GroupsReport:
    """One soak of groups; raises Unavailable for a cluster it cannot make.
    ``at_least`` keeps producing past ``seconds`` until that many were ACKed."""
    if nodes_count == 1 and replicas != 1:
        raise Unavailable("--replicas needs a cluster: --nodes 3")
    rng = random.Random(seed)  # the faults': their moments and targets repeat per seed
    report = GroupsReport(nodes=nodes_count, replicas=replicas, seconds=seconds)
    acked: set[bytes] = set()
    with tempfile.TemporaryDirectory(prefix="pzq-chaos-groups-", dir=directory) as tmp, \
            ExitStack() as cleanup:
        nodes = Nodes(Path(tmp), nodes_count, False, replicas=replicas, consume=True,
                      node_args=NODE_ARGS, timings=TIMINGS, cluster_args=("--delivery-headers",),
                      modes=modes)
        cleanup.callback(nodes.close)
        nodes.start()
        chaos = Chaos(nodes, groups, report, seed)
        chaos.start()
        cleanup.callback(chaos.stop)
        faults = Faults(nodes, seconds, {"restarts": kills, "consumer_faults": consumer_faults},
                        report, rng, {"restarts": chaos.kill_and_restart,
                                      "consumer_faults": chaos.consumer_fault})
        faults.start()
        produce_for(nodes.members, seconds, report, acked, random.Random(seed + 1),
                    topic=TOPIC, rate=rate, at_least=at_least)
        faults.join()
        for error in [faults.error, *chaos.errors()]:
            if error is not None:
                raise error
        report.acked = len(acked)
        _drain(chaos, acked, drain_timeout)
        chaos.stop()
        report.groups = chaos.figures(acked)
        report.store_left = chaos.store_left()
    return report


def _drain(chaos: Chaos, acked: set[bytes], timeout: float) -> None:
    """Wait until every group had every ACKed message and the stores emptied; what
    does not come in time is reported."""
    try:
        wait_until(lambda: chaos.delivered_all(acked), timeout, interval=0.1,
                   message="every ACKed message delivered to every group")
        wait_until(lambda: not any(chaos.store_left().values()), timeout, interval=0.2,
                   message="every store and every copy empty")
    except TimeoutError:
        pass


def print_table(report: GroupsReport) -> None:
    print(f"{report.nodes} node(s), --replicas {report.replicas}, {report.seconds:g} s: "
          f"produced {report.produced}, ACKed {report.acked} "
          f"(REPLICATION_FAILED {report.replication_failed}), refused {report.refused}; "
          f"kills {report.restarts} (takeovers awaited {report.takeovers_awaited}), "
          f"consumer faults {report.consumer_faults}")
    print(f"{'group':<12}{'ACKed':>9}{'delivered':>11}{'lost':>6}{'duplicates':>12}"
          f"{'explained':>11}{'bound':>8}{'refused':>9}  causes")
    for g in report.groups:
        causes = ", ".join(f"{cause} {count}" for cause, count in sorted(g.explained.items()))
        print(f"{g.group:<12}{g.acked:>9}{g.delivered:>11}{g.lost:>6}{g.duplicates:>12}"
              f"{g.duplicates - g.unexplained:>11}{g.bound:>8}{g.refused_answers:>9}  "
              f"{causes or '-'}")
    for g in report.groups:
        if g.count_not_grown:
            kinds = ", ".join(f"{kind} {count}" for kind, count in
                              sorted(g.count_not_grown.items()))
            print(f"{g.group}: delivered again with a count that did not grow "
                  f"{sum(g.count_not_grown.values())} ({kinds}), with DELIVERY:1 "
                  f"{g.count_one_again}")
        if g.kill_gaps or g.count_beyond_wake:
            gaps = ", ".join(f"{gap:.3f}" for gap in g.kill_gaps)
            print(f"{g.group}: origin>origin inside the last wake before a kill "
                  f"{len(g.kill_gaps)} (the earlier delivery {gaps or '-'} s before it; "
                  f"bound {WAKE_BOUND_SECONDS:g} s), beyond it {g.count_beyond_wake}")
        if g.survivor_kill_gaps:
            gaps = ", ".join(f"{gap:.3f}" for gap in g.survivor_kill_gaps)
            print(f"{g.group}: origin>survivor, the origin's delivery before its kill: "
                  f"{gaps} s")
    for g in report.groups:
        for story in g.stories:
            print(f"unexplained: {story}")
        for story in g.beyond_stories:
            print(f"count beyond the last wake before a kill: {story}")
        for story in g.survivor_stories:
            print(f"origin>survivor beyond a heartbeat and a wake (a figure): {story}")
    left = {name: count for name, count in report.store_left.items() if count}
    print(f"store at the end: {left or 'empty'}")


def make_argument_parser() -> argparse.ArgumentParser:
    parser = soak_parser("chaos_groups", __doc__.split("\n\n")[0], seconds=60.0,
                         rate=400.0, kills=6)
    parser.add_argument("--at-least", type=int, default=0, metavar="MESSAGES",
                        help="produce past --seconds (at most 60 s more) until this many "
                             "messages were ACKed")
    parser.add_argument("--consumer-faults", type=int, default=10,
                        help="group consumers closed abruptly and started again")
    return parser


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or min(args.kills, args.consumer_faults,
                                                  args.at_least) < 0:
        parser.exit(ExitCode.USAGE, "chaos_groups: error: --rate and --seconds must be "
                                    "above 0, --kills, --consumer-faults and --at-least "
                                    "not below\n")
    return report_and_exit(parser, lambda: run(args.nodes, args.seconds, args.kills,
                                               args.consumer_faults, args.replicas,
                                               args.groups, args.rate, args.seed,
                                               at_least=args.at_least,
                                               modes=store_modes(args)),
                           print_table, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
