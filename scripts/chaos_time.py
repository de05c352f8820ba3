#!/usr/bin/env python3
"""A soak of time in messages: delayed and scheduled messages, TTLs, priorities, NACK
delays and a group's backoff, while nodes are SIGKILLed and restarted.

Producers send to one topic (``timed``, ``priorities=on``, ``on_expire=drop``) a mix:
plain messages, delayed ones (``DELAY`` or ``NOT-BEFORE``, 0.2 to 3 s), expiring ones
(a short ``TTL``, 0.3 to 3 s, or a long one), prioritised ones (``PRIORITY`` 1 to 9)
and a few of those together; each body says what its message was sent with, and the
producer notes when it sent each and when its ACK came. The groups of ``--groups``
read the topic (``ack_timeout=1.5s backoff=0.5s,1s``), two consumers a node each:
they NACK some deliveries with a ``DELAY`` (0.2 to 2 s), let some time out (the
backoff then holds them back) and ACK the rest at once. ``--kills`` SIGKILLs a node
and restarts it, in a cluster (``--nodes 3``) half the time only once a peer took its
messages over (past ``--timeout-nodes``), as scripts/chaos_groups.py does.

At the end, per group, it checks what docs/time.rst and docs/groups.rst promise, with
the times the nodes put on their deliveries (``sent_us``, the node's clock when it sent
them; one host, one clock) and a tolerance of TOLERANCE_S for the clock reads:

* lost: every message ACKed "1" with no TTL, or whose TTL had not passed by the end,
  was delivered to the group at least once;
* early: no delayed message was delivered, by any node (its own, a survivor after a
  takeover, either after a restart), before its due time (``NOT-BEFORE``; for a
  ``DELAY`` its send plus the delay: the node counts from when it stores it, later);
* NACK delay and backoff: a message its own node delivered again after a NACK with a
  delay, or after its deadline passed, came no sooner than the NACK's send plus the
  delay, or the deadline plus the backoff's step. Not checked, as the docs say: a
  survivor's delivery after a takeover (a copy carries no wait), and a wait the node
  may not have written before a kill (a NACK less than WAKE_BOUND_S before its node's
  kill; a deadline that passed less than the reaper's period and WAKE_BOUND_S before
  it); a NACK that came after the delivery's deadline counts as a timeout;
* expired: no message was delivered after its TTL ended (its ACK plus the TTL: the node
  counts from when it stored it, sooner);
* priorities: when a node delivered its own message for the first time, no message of
  that node with a higher priority, ready (ACKed, due) more than PRIORITY_BOUND_S
  before, was still waiting for its first delivery to the group (docs/time.rst: a
  takeover delivers in arrival order, what is given back goes first, and what is out
  or in a consumer's window is not recalled: so only the node's own first deliveries
  are checked, and not those of its first RESTART_GRACE_S after a restart that may be
  given back with a count the kill made it forget, nor those less than WAKE_BOUND_S
  before a kill);
* empty: once everything is ACKed or expired, every node's ``messages``,
  ``replicas_held``, ``scheduled`` and ``scheduled_copies_held`` come to 0.

Every breach is printed with its body's story (deliveries, answers, kills) and the soak
exits 1. Run it with the project's environment:

    .venv/bin/python scripts/chaos_time.py --seconds 20 --kills 3
    .venv/bin/python scripts/chaos_time.py --nodes 3 --replicas 1 --seconds 25 --kills 2
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import itertools
import random
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for chaos
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from chaos import NO_MODES, Faults, Nodes, StoreModes, Unavailable, _pace, store_modes  # noqa: E402
from chaos_shared import (  # noqa: E402
    SoakConsumer,
    declare_groups,
    kill_and_restart,
    report_and_exit,
    soak_parser,
    store_left,
)

from pzq.bench.nodes import NodeProcess, wait_until  # noqa: E402
from pzq.client import GroupConsumer, Message, Producer, ProducerAck  # noqa: E402
from pzq.clock import Now  # noqa: E402
from pzq.errors import ExitCode  # noqa: E402
from pzq.protocol.message_keys import parse_message_key  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402
from tests.support.partition_cluster import ClusterTimings  # noqa: E402

TOPIC = "timed"
TOPIC_SETTINGS = "priorities=on on_expire=drop"
GROUP_ACK_TIMEOUT_S = 1.5
BACKOFF_S = (0.5, 1.0)  # the group's steps: after a first delivery, after the later ones
GROUP_SETTINGS = (f"ack_timeout={GROUP_ACK_TIMEOUT_S:g}s "
                  f"backoff={','.join(f'{step:g}s' for step in BACKOFF_S)}")
REAPER_S = 0.2
NODE_ARGS = ["--ack-timeout", "5000000", "--reaper-frequency", str(int(REAPER_S * 1e6)),
             "--delivery-headers"]
TIMINGS = ClusterTimings(timeout_nodes_us=1_000_000, ack_timeout_us=5_000_000,
                         timeout_replication_us=500_000,
                         reaper_frequency_us=int(REAPER_S * 1e6))
CONSUMERS_PER_NODE = 2  # of each group
WINDOW = 20
NACK_SHARE = 0.05  # of first and second deliveries: NACKed with a delay
NACK_DELAY_S = (0.2, 2.0)
TIMEOUT_SHARE = 0.03  # of first deliveries: never answered (the deadline, the backoff)
DELAY_S = (0.2, 3.0)
SHORT_TTL_S = (0.3, 3.0)
LONG_TTL_S = 600.0
TOLERANCE_S = 0.05  # clock reads on one host
# A wake's deliveries and the NACKs it read are written with the next wake's batch at
# most this long after (measured for scripts/chaos_groups.py: 186 ms at most)
WAKE_BOUND_S = 0.25
PRIORITY_BOUND_S = 0.5  # ready this long and not delivered while a lower one went
RESTART_GRACE_S = 2.0  # a restarted node's first deliveries may be given back ones
# a delivery let expire is NACKed this long after its deadline, for its credit only
LATE_NACK_AFTER_S = 1.0
LATE_MARGIN_S = 0.3  # a NACK this close to its delivery's deadline may come too late
NOTHING = float("inf")


@dataclass
class Sent:
    """One message as its producer sent it (times: time.time())."""

    body: bytes
    node: int  # the node it was sent to: its origin
    kind: str
    sent: float
    delay_s: float | None = None
    not_before_us: int | None = None
    ttl_s: float | None = None
    priority: int | None = None
    acked: float | None = None  # when its ACK "1" was read

    def options(self) -> dict[str, float | int | None]:
        return {"delay": self.delay_s, "not_before": self.not_before_us, "ttl": self.ttl_s,
                "priority": self.priority}

    def due_after(self) -> float:
        """When it is due at the earliest (a DELAY counts from its storing, later)."""
        if self.not_before_us is not None:
            return self.not_before_us / 1e6
        return self.sent + (self.delay_s or 0.0)

    def due_by(self) -> float:
        """When it is due at the latest (its ACK came after its storing)."""
        assert self.acked is not None
        if self.not_before_us is not None:
            return max(self.acked, self.not_before_us / 1e6)
        return self.acked + (self.delay_s or 0.0)

    def expired_after(self) -> float:
        return NOTHING if self.ttl_s is None else self.sent + self.ttl_s

    def expired_by(self) -> float:
        assert self.acked is not None
        return NOTHING if self.ttl_s is None else self.acked + self.ttl_s

    def rank(self) -> int:
        return self.priority or 0


def say(sent: Sent) -> bytes:
    """The body: what the message was sent with."""
    words = [sent.body.decode(), sent.kind]
    if sent.delay_s is not None:
        words.append(f"DELAY:{round(sent.delay_s * 1000)}")
    if sent.not_before_us is not None:
        words.append(f"NOT-BEFORE:{sent.not_before_us}")
    if sent.ttl_s is not None:
        words.append(f"TTL:{round(sent.ttl_s * 1000)}")
    if sent.priority is not None:
        words.append(f"PRIORITY:{sent.priority}")
    return " ".join(words).encode()


def pick(rng: random.Random, number: int, node: int) -> Sent:
    """The next message of the mix."""
    now = time.time()
    sent = Sent(b"%08d" % number, node, "plain", now)
    draw = rng.random()
    if draw < 0.3:
        return sent
    if draw < 0.42:
        sent.kind, sent.delay_s = "delayed", round(rng.uniform(*DELAY_S), 3)
    elif draw < 0.54:
        sent.kind = "scheduled"
        sent.not_before_us = int((now + rng.uniform(*DELAY_S)) * 1e6)
    elif draw < 0.64:
        sent.kind, sent.ttl_s = "short TTL", round(rng.uniform(*SHORT_TTL_S), 3)
    elif draw < 0.7:
        sent.kind, sent.ttl_s = "long TTL", LONG_TTL_S
    elif draw < 0.9:
        sent.kind, sent.priority = "priority", rng.randint(1, 9)
    else:
        sent.kind, sent.priority = "mixed", rng.randint(1, 9)
        sent.delay_s = round(rng.uniform(*DELAY_S), 3)
        if rng.random() < 0.5:
            sent.ttl_s = round(rng.uniform(*SHORT_TTL_S), 3)
    return sent


@dataclass
class Delivery:
    """One delivery a group consumer received, and its answer."""

    node: int  # the node that delivered it
    origin: int  # the node whose message it is
    consumer: int
    sent_us: int  # the node's clock when it sent it
    deadline_us: int
    count: int | None
    received: float
    answer: str | None = None  # "ACK", "NACK" (with a delay); None: let time out
    answered: float | None = None
    nack_delay_s: float = 0.0
    late_nack: float | None = None  # one let time out: when its late NACK was asked for

    @property
    def at(self) -> float:
        return self.sent_us / 1e6


@dataclass
class Life:
    killed: float  # time.time() when the SIGKILL was sent
    back: float | None = None


@dataclass
class GroupFigures:
    group: str
    required: int = 0  # ACKed with no TTL, or one not passed by the end
    delivered: int = 0  # distinct messages
    lost: int = 0
    duplicates: int = 0
    nacked: int = 0  # NACKs with a delay
    timed_out: int = 0  # deliveries let time out
    late_nacks: int = 0  # ... whose late NACK was asked for (for the credit)
    # ... of those, by then its node was killed: the consumer leaves such a NACK out (it
    # would give back the restarted node's delivery of the message since), or the
    # restarted node refuses it as come before CONSUME (asked for while it was down)
    late_nacks_after_kill: int = 0
    delayed_checked: int = 0  # deliveries of delayed or scheduled messages
    early: int = 0
    earliest_margin_ms: float | None = None  # the least delivery time past due
    redeliveries_checked: int = 0  # after a NACK's delay or a backoff, by the node
    redelivered_early: int = 0
    again_margin_ms: float | None = None  # the least time past a wait's end
    waits_excused: dict[str, int] = field(default_factory=dict)  # by why
    ttl_checked: int = 0  # deliveries of messages with a TTL
    after_ttl: int = 0
    ttl_margin_ms: float | None = None  # the latest delivery before its TTL's end (below 0)
    priority_checked: int = 0  # first deliveries by their own node
    priority_inversions: int = 0
    priority_excused: int = 0  # in a restart's grace or a kill's last wake
    stories: list[str] = field(default_factory=list)


@dataclass
class TimeReport:
    nodes: int
    replicas: int
    seconds: float
    produced: int = 0
    acked: int = 0
    replication_failed: int = 0
    refused: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # ACKed messages by kind
    restarts: int = 0
    takeovers_awaited: int = 0
    store_left: dict[str, int] = field(default_factory=dict)
    # when something is left: each node's groups of the topic as STATS gives them
    groups_left: dict[str, dict[str, object]] = field(default_factory=dict)
    consumers_left: list[str] = field(default_factory=list)  # ... and each consumer's story
    groups: list[GroupFigures] = field(default_factory=list)

    def failed(self) -> bool:
        return any(g.lost or g.early or g.redelivered_early or g.after_ttl
                   or g.priority_inversions for g in self.groups) \
            or any(self.store_left.values())


class Ledger:
    """What was sent, what each group was given and answered, and the nodes' lives."""

    def __init__(self, groups: Sequence[str], node_ids: Sequence[bytes]) -> None:
        self.lock = threading.Lock()
        self.node_index = {node_id: index for index, node_id in enumerate(node_ids)}
        self.sent: dict[bytes, Sent] = {}
        self.deliveries: dict[str, defaultdict[bytes, list[Delivery]]] = {
            group: defaultdict(list) for group in groups}
        self.lives: defaultdict[int, list[Life]] = defaultdict(list)

    def delivered(self, group: str, body: bytes, delivery: Delivery) -> None:
        with self.lock:
            self.deliveries[group][body].append(delivery)

    def killed_between(self, node: int, start: float, end: float) -> bool:
        return any(start <= life.killed <= end for life in self.lives[node])

    def back_before(self, node: int, at: float) -> Life | None:
        """The node's last life's end before ``at`` (its kill and return)."""
        ended = [life for life in self.lives[node] if life.killed <= at]
        return ended[-1] if ended else None


def body_of(message: Message) -> bytes:
    return message.parts[0].split(b" ", 1)[0]


class TimeConsumer(SoakConsumer):
    """One consumer of one group on one node: NACKs some with a delay, lets some time
    out, ACKs the rest at once."""

    def __init__(self, number: int, ledger: Ledger, group: str, node: int, dsn: str,
                 seed: int) -> None:
        super().__init__(number, group, node, dsn, seed)
        self.ledger = ledger
        self.joins = 0
        self.received = 0
        self.last_received = time.time()

    def _one_consumer(self) -> None:
        joined = self.joined(TOPIC, WINDOW)
        if joined is None:
            return
        consumer, context = joined
        self.joins += 1
        let_expire: list[tuple[Message, Delivery]] = []
        while not self.stopping.is_set():
            message = consumer.receive(0.05)
            if message is not None:
                self.received += 1
                self.last_received = time.time()
                expiring = self._take(consumer, message)
                if expiring is not None:
                    let_expire.append((message, expiring))
            let_expire = self._credit_back(consumer, let_expire)
        consumer.close()
        context.term()

    def _credit_back(self, consumer: GroupConsumer, let_expire: list[tuple[Message, Delivery]]
                     ) -> list[tuple[Message, Delivery]]:
        """A late NACK of each delivery let expire, well after the node found its
        deadline: it only gives the credit back (docs/groups.rst: an unanswered one
        keeps its credit spent while the connection lasts), the wait goes on. One
        from before its node restarted is not sent (the consumer leaves it out): it
        would give back the restarted node's delivery of the message since."""
        now = time.time()
        due = [(message, delivery) for message, delivery in let_expire
               if message.deadline_us + LATE_NACK_AFTER_S * 1e6 <= now * 1e6]
        if due:
            consumer.nack_many([message for message, _ in due])
            for _, delivery in due:
                delivery.late_nack = now
            return [pair for pair in let_expire if pair not in due]
        return let_expire

    def _take(self, consumer: GroupConsumer, message: Message) -> Delivery | None:
        """Answer the delivery, or not: the delivery of one let expire."""
        received = time.time()
        origin, _ = parse_message_key(message.key)
        delivery = Delivery(self.node, self.ledger.node_index.get(origin, -1), self.number,
                            message.sent_us, message.deadline_us, message.deliveries,
                            received)
        count = message.deliveries or 1
        draw = self.rng.random()
        if count == 1 and draw < TIMEOUT_SHARE:
            self.ledger.delivered(self.group, body_of(message), delivery)
            return delivery  # not answered in time: its deadline passes, the backoff holds it
        delivery.answered = time.time()  # before the answer leaves
        if count <= 2 and draw < TIMEOUT_SHARE + NACK_SHARE:
            delivery.answer = "NACK"
            delivery.nack_delay_s = round(self.rng.uniform(*NACK_DELAY_S), 3)
            self.ledger.delivered(self.group, body_of(message), delivery)
            consumer.nack(message, delay=delivery.nack_delay_s)
        else:
            delivery.answer = "ACK"
            self.ledger.delivered(self.group, body_of(message), delivery)
            consumer.ack(message)
        return None


def produce_timed(nodes: list[NodeProcess], seconds: float, rate: float, report: TimeReport,
                  ledger: Ledger, rng: random.Random) -> None:
    """Send the mix at ``rate`` messages a second to random nodes for ``seconds``, in
    windowed streams; a node that stops answering is left for another one."""
    context = zmq.Context()
    started = time.monotonic()
    numbers = itertools.count()
    while time.monotonic() - started < seconds:
        index = rng.randrange(len(nodes))
        with Producer(nodes[index].receive_dsn, window=100, context=context) as producer:
            for _ in range(rng.randint(50, 300)):
                if time.monotonic() - started >= seconds:
                    break
                _pace(started, report.produced, rate)
                sent = pick(rng, next(numbers), index)
                with ledger.lock:
                    ledger.sent[sent.body] = sent
                try:
                    producer.send([say(sent)], msg_id=sent.body, timeout=2.0, topic=TOPIC,
                                  **sent.options())  # type: ignore[arg-type]
                except TimeoutError:
                    break  # the node died under us: start over on another one
                report.produced += 1
                _note_acks(producer.acks(), report, ledger)
            try:
                _note_acks(producer.flush(3.0), report, ledger)
            except TimeoutError:
                _note_acks(producer.acks(), report, ledger)
    context.destroy(linger=0)


def _note_acks(acks: list[ProducerAck], report: TimeReport, ledger: Ledger) -> None:
    now = time.time()
    for ack in acks:
        if ack.ok:
            with ledger.lock:
                ledger.sent[ack.msg_id].acked = now
            report.acked += 1
            report.replication_failed += ack.replication_failed
        else:
            report.refused += 1


class Checks:
    """The checks of one group's deliveries against what was sent."""

    def __init__(self, ledger: Ledger, group: str, end: float) -> None:
        self.ledger, self.group, self.end = ledger, group, end
        self.deliveries = ledger.deliveries[group]
        self.figures = GroupFigures(group)
        self.excused: Counter[str] = Counter()

    def run(self) -> GroupFigures:
        f = self.figures
        required = required_bodies(self.ledger.sent, self.end)
        f.required = len(required)
        f.delivered = len(self.deliveries)
        for body in sorted(required - self.deliveries.keys()):
            f.lost += 1
            self._story(body, "lost: ACKed, not expired, never delivered")
        f.duplicates = sum(len(d) - 1 for d in self.deliveries.values())
        for body, deliveries in self.deliveries.items():
            sent = self.ledger.sent.get(body)
            if sent is None:
                continue
            f.nacked += sum(d.answer == "NACK" for d in deliveries)
            f.timed_out += sum(d.answer is None for d in deliveries)
            for d in deliveries:
                if d.late_nack is not None:
                    f.late_nacks += 1
                    f.late_nacks_after_kill += self.ledger.killed_between(d.node, d.at,
                                                                          d.late_nack)
            self._check_due(body, sent, deliveries)
            self._check_ttl(body, sent, deliveries)
            self._check_waits(body, deliveries)
        self._check_priorities()
        f.waits_excused = dict(self.excused)
        return f

    def _check_due(self, body: bytes, sent: Sent, deliveries: list[Delivery]) -> None:
        if sent.delay_s is None and sent.not_before_us is None:
            return
        due = sent.due_after()
        for delivery in deliveries:
            self.figures.delayed_checked += 1
            margin_ms = (delivery.at - due) * 1000
            f = self.figures
            f.earliest_margin_ms = _least(f.earliest_margin_ms, margin_ms)
            if delivery.at < due - TOLERANCE_S:
                f.early += 1
                self._story(body, f"delivered {-margin_ms:.0f} ms before its due time by "
                                  f"node{delivery.node}")

    def _check_ttl(self, body: bytes, sent: Sent, deliveries: list[Delivery]) -> None:
        if sent.ttl_s is None or sent.acked is None:
            return
        expired = sent.expired_by()
        for delivery in deliveries:
            self.figures.ttl_checked += 1
            margin_ms = (delivery.at - expired) * 1000
            if self.figures.ttl_margin_ms is None or margin_ms > self.figures.ttl_margin_ms:
                self.figures.ttl_margin_ms = round(margin_ms, 1)
            if delivery.at > expired + TOLERANCE_S:
                self.figures.after_ttl += 1
                self._story(body, f"delivered {(delivery.at - expired) * 1000:.0f} ms after "
                                  f"its TTL ended by node{delivery.node}")

    def _check_waits(self, body: bytes, deliveries: list[Delivery]) -> None:
        """A delivery again by the message's own node after a NACK with a delay, or a
        deadline that passed, of its last delivery there."""
        for at, again in enumerate(deliveries):
            if at == 0:
                continue
            if again.node != again.origin:
                if deliveries[at - 1].answer != "ACK":
                    self.excused["a survivor's (a copy carries no wait)"] += 1
                continue
            before = [d for d in deliveries[:at] if d.node == again.node]
            if not before:
                continue
            last = before[-1]
            deadline = last.deadline_us / 1e6
            if last.answer == "ACK":
                continue
            nacked = last.answer == "NACK" and last.answered is not None \
                and last.answered < deadline - LATE_MARGIN_S
            if nacked:
                assert last.answered is not None
                due = last.answered + last.nack_delay_s
                written_by = last.answered + WAKE_BOUND_S
                why = f"NACK DELAY:{last.nack_delay_s * 1000:.0f}"
            else:
                steps = BACKOFF_S
                step = steps[min((last.count or 1) - 1, len(steps) - 1)]
                due = deadline + step
                written_by = deadline + REAPER_S + WAKE_BOUND_S
                why = f"deadline and backoff {step:g}s"
            if self.ledger.killed_between(again.node, last.at, written_by):
                self.excused[f"{'NACK' if nacked else 'backoff'}: a kill before written"] += 1
                continue
            self.figures.redeliveries_checked += 1
            self.figures.again_margin_ms = _least(self.figures.again_margin_ms,
                                                  (again.at - due) * 1000)
            if again.at < due - TOLERANCE_S:
                self.figures.redelivered_early += 1
                self._story(body, f"delivered again {(due - again.at) * 1000:.0f} ms before "
                                  f"its wait ended ({why}) by node{again.node}")

    def _check_priorities(self) -> None:
        """Each node's first deliveries of its own messages: none while a message of a
        higher priority of that node was ready for PRIORITY_BOUND_S, undelivered."""
        first: dict[bytes, Delivery] = {body: deliveries[0]
                                        for body, deliveries in self.deliveries.items()}
        by_node: defaultdict[int, list[Sent]] = defaultdict(list)
        for sent in self.ledger.sent.values():
            if sent.acked is not None and sent.priority:
                by_node[sent.node].append(sent)
        for body, delivery in first.items():
            sent = self.ledger.sent.get(body)
            if sent is None or delivery.node != delivery.origin \
                    or delivery.count not in (None, 1):
                continue
            self.figures.priority_checked += 1
            ahead = [higher for higher in by_node[delivery.node]
                     if higher.rank() > sent.rank()
                     and higher.due_by() <= delivery.at - PRIORITY_BOUND_S
                     and higher.expired_after() > delivery.at
                     and _first_at(first.get(higher.body)) > delivery.at]
            if not ahead:
                continue
            if self._excused_priority(sent, delivery):
                self.figures.priority_excused += 1
                continue
            self.figures.priority_inversions += 1
            worst = max(ahead, key=lambda higher: (higher.rank(), -higher.due_by()))
            self._story(body, f"first delivered (priority {sent.rank()}) by node"
                              f"{delivery.node} while {len(ahead)} of higher priority "
                              f"waited, e.g. {say(worst).decode()!r}, ready "
                              f"{delivery.at - worst.due_by():.3f} s before",
                        also=worst.body)

    def _excused_priority(self, sent: Sent, delivery: Delivery) -> bool:
        """A delivery that may be one given back after a restart (its count forgotten
        with the kill), or one of the last wake before a kill."""
        life = self.ledger.back_before(delivery.node, delivery.at)
        if life is not None and sent.acked is not None and sent.acked < life.killed \
                and (life.back is None or delivery.at < life.back + RESTART_GRACE_S):
            return True
        return self.ledger.killed_between(delivery.node, delivery.at,
                                          delivery.at + WAKE_BOUND_S)

    def _story(self, body: bytes, what: str, also: bytes | None = None) -> None:
        lines = [f"{self.group} {body.decode()}: {what}"]
        for told in (body, also):
            if told is None:
                continue
            sent = self.ledger.sent.get(told)
            if sent is None:
                continue
            lines.append(f"  {say(sent).decode()!r} to node{sent.node}: sent at "
                         f"{sent.sent:.3f}, ACKed at "
                         f"{'-' if sent.acked is None else f'{sent.acked:.3f}'}")
            for d in self.deliveries.get(told, []):
                answer = (f"{d.answer} at {d.answered:.3f}" if d.answered is not None
                          else "no answer")
                if d.answer == "NACK":
                    answer += f" DELAY {d.nack_delay_s * 1000:.0f} ms"
                if d.late_nack is not None:
                    answer += f", late NACK asked for at {d.late_nack:.3f}"
                lines.append(f"    delivered by node{d.node} (origin node{d.origin}) at "
                             f"{d.at:.3f}, count {d.count}, deadline "
                             f"{d.deadline_us / 1e6:.3f}, received {d.received:.3f}; {answer}")
        for node, lives in sorted(self.ledger.lives.items()):
            for life in lives:
                back = "-" if life.back is None else f"{life.back:.3f}"
                lines.append(f"  node{node} killed at {life.killed:.3f}, back at {back}")
        self.figures.stories.append("\n".join(lines))


def _least(known: float | None, margin_ms: float) -> float:
    return round(margin_ms if known is None else min(known, margin_ms), 1)


def _first_at(delivery: Delivery | None) -> float:
    return NOTHING if delivery is None else delivery.at


def required_bodies(sent: dict[bytes, Sent], end: float) -> set[bytes]:
    """ACKed messages that must reach every group: no TTL, or one not passed at ``end``."""
    return {body for body, message in sent.items()
            if message.acked is not None and message.expired_after() > end}


class Soak:
    """The nodes, the group consumers and the kills of one run."""

    def __init__(self, nodes: Nodes, groups: Sequence[str], report: TimeReport,
                 seed: int) -> None:
        self.nodes, self.groups, self.report = nodes, list(groups), report
        self.node_ids = declare_groups(nodes, TOPIC, groups, TOPIC_SETTINGS, GROUP_SETTINGS)
        self.ledger = Ledger(groups, self.node_ids)
        self.consumers = [
            TimeConsumer(number, self.ledger, group, node, member.consume_dsn,
                         seed * 1000 + number)
            for number, (group, (node, member), _) in enumerate(
                (group, placed, copy) for group in groups
                for placed in enumerate(nodes.members) for copy in range(CONSUMERS_PER_NODE))]

    def start(self) -> None:
        for consumer in self.consumers:
            consumer.start()

    def kill_and_restart(self, index: int, rng: random.Random) -> None:
        lives = self.ledger.lives[index]

        def killed(signalled: Now) -> None:
            with self.ledger.lock:
                lives.append(Life(signalled.wall_us / 1e6))

        def back(now: Now) -> None:
            with self.ledger.lock:
                lives[-1].back = now.wall_us / 1e6

        def taken(came: bool) -> None:
            self.report.takeovers_awaited += came

        kill_and_restart(self.nodes, self.node_ids, index, rng, killed, back, taken)

    def stop(self) -> None:
        for consumer in self.consumers:
            consumer.stopping.set()
        for consumer in self.consumers:
            consumer.join(10)

    def errors(self) -> list[BaseException]:
        return [c.error for c in self.consumers if c.error is not None]

    def delivered_all(self) -> bool:
        with self.ledger.lock:
            required = required_bodies(self.ledger.sent, time.time())
            return all(required <= deliveries.keys()
                       for deliveries in self.ledger.deliveries.values())

    def store_left(self) -> dict[str, int]:
        return store_left(self.nodes, STORE_FIGURES)

    def consumers_left(self) -> list[str]:
        """Each consumer: its joins, its deliveries, and where its thread is now."""
        now = time.time()
        frames = sys._current_frames()
        told = []
        for c in self.consumers:
            frame = frames.get(c.ident or -1)
            where = "" if frame is None else " at " + " < ".join(
                f"{step.name} ({Path(step.filename).name}:{step.lineno})"
                for step in reversed(traceback.extract_stack(frame)[-4:]))
            told.append(f"consumer {c.number} ({c.group} on node{c.node}): joined {c.joins} "
                        f"times, {c.received} deliveries, the last "
                        f"{now - c.last_received:.1f} s ago{where}")
        return told

    def groups_left(self) -> dict[str, dict[str, object]]:
        """Each node's groups of the topic: where what is left stands."""
        shown = {}
        for index, node in enumerate(self.nodes.members):
            try:
                groups = node.stats()["topics"][TOPIC]["groups"]
            except (OSError, TimeoutError, RuntimeError, KeyError):
                continue
            for name, figures in groups.items():
                shown[f"node{index} {name}"] = {
                    key: figures.get(key) for key in GROUP_FIGURES_SHOWN}
        return shown


GROUP_FIGURES_SHOWN = ("backlog", "inflight", "ready", "delayed", "lag", "consumers", "credits",
                       "delivered", "acked", "nacked", "expired")
STORE_FIGURES = {"messages": "messages", "copies": "replicas_held", "scheduled": "scheduled",
                 "scheduled copies": "scheduled_copies_held"}


def run(nodes_count: int = 1, seconds: float = 10.0, kills: int = 2, replicas: int = 1,
        groups: Sequence[str] = ("billing", "audit"), rate: float = 200.0, seed: int = 1,
        drain_timeout: float = 60.0, directory: Path | None = None,
        modes: StoreModes = NO_MODES) -> TimeReport:
    """One soak; raises Unavailable for a cluster it cannot make."""
    if nodes_count == 1 and replicas != 1:
        raise Unavailable("--replicas needs a cluster: --nodes 3")
    rng = random.Random(seed)
    report = TimeReport(nodes=nodes_count, replicas=replicas, seconds=seconds)
    with tempfile.TemporaryDirectory(prefix="pzq-chaos-time-", dir=directory) as tmp, \
            ExitStack() as cleanup:
        nodes = Nodes(Path(tmp), nodes_count, False, replicas=replicas, consume=True,
                      node_args=NODE_ARGS, timings=TIMINGS, cluster_args=("--delivery-headers",),
                      modes=modes)
        cleanup.callback(nodes.close)
        nodes.start()
        soak = Soak(nodes, groups, report, seed)
        soak.start()
        cleanup.callback(soak.stop)
        faults = Faults(nodes, seconds, {"restarts": kills}, report, rng,
                        {"restarts": soak.kill_and_restart})
        faults.start()
        produce_timed(nodes.members, seconds, rate, report, soak.ledger,
                      random.Random(seed + 1))
        faults.join()
        for error in [faults.error, *soak.errors()]:
            if error is not None:
                raise error
        _drain(soak, drain_timeout)
        report.store_left = soak.store_left()
        if any(report.store_left.values()):  # while its consumers are still there
            report.groups_left = soak.groups_left()
            report.consumers_left = soak.consumers_left()
        soak.stop()
        end = time.time()
        report.kinds = dict(Counter(sent.kind for sent in soak.ledger.sent.values()
                                    if sent.acked is not None))
        report.groups = [Checks(soak.ledger, group, end).run() for group in groups]
    return report


def _drain(soak: Soak, timeout: float) -> None:
    """Until every group had every message it must have and the stores emptied; what
    does not come in time is reported."""
    try:
        wait_until(soak.delivered_all, timeout, interval=0.1,
                   message="every ACKed, unexpired message delivered to every group")
        wait_until(lambda: not any(soak.store_left().values()), timeout, interval=0.2,
                   message="every store empty")
    except TimeoutError:
        pass


def print_table(report: TimeReport) -> None:
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(report.kinds.items()))
    print(f"{report.nodes} node(s), --replicas {report.replicas}, {report.seconds:g} s: "
          f"produced {report.produced}, ACKed {report.acked} ({kinds}; "
          f"REPLICATION_FAILED {report.replication_failed}), refused {report.refused}; "
          f"kills {report.restarts} (takeovers awaited {report.takeovers_awaited})")
    print(f"tolerance {TOLERANCE_S * 1000:g} ms, priority bound {PRIORITY_BOUND_S:g} s")
    print(f"{'group':<10}{'required':>9}{'lost':>6}{'dups':>6}{'delayed':>9}{'early':>7}"
          f"{'margin ms':>10}{'again':>7}{'early':>7}{'margin ms':>10}{'TTL':>7}{'late':>6}"
          f"{'margin ms':>10}{'prio':>7}{'inv':>5}{'exc':>5}")
    for g in report.groups:
        margins = ["-" if margin is None else f"{margin:g}" for margin in
                   (g.earliest_margin_ms, g.again_margin_ms, g.ttl_margin_ms)]
        print(f"{g.group:<10}{g.required:>9}{g.lost:>6}{g.duplicates:>6}"
              f"{g.delayed_checked:>9}{g.early:>7}{margins[0]:>10}{g.redeliveries_checked:>7}"
              f"{g.redelivered_early:>7}{margins[1]:>10}{g.ttl_checked:>7}{g.after_ttl:>6}"
              f"{margins[2]:>10}{g.priority_checked:>7}{g.priority_inversions:>5}"
              f"{g.priority_excused:>5}")
        excused = ", ".join(f"{why} {n}" for why, n in sorted(g.waits_excused.items()))
        print(f"  {g.group}: NACKs with a delay {g.nacked}, let time out {g.timed_out} "
              f"(late NACKs {g.late_nacks}, {g.late_nacks_after_kill} after its node's kill: "
              f"left out, or refused before CONSUME); "
              f"waits not checked: {excused or 'none'}")
    for g in report.groups:
        for story in g.stories:
            print(f"breach: {story}")
    left = {name: count for name, count in report.store_left.items() if count}
    print(f"store at the end: {left or 'empty'}")
    for name, figures in report.groups_left.items():
        print(f"  {name}: {figures}")
    for line in report.consumers_left:
        print(f"  {line}")


def make_argument_parser() -> argparse.ArgumentParser:
    return soak_parser("chaos_time", __doc__.split("\n\n")[0], seconds=30.0, rate=200.0,
                       kills=3)


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.kills < 0:
        parser.exit(ExitCode.USAGE, "chaos_time: error: --rate and --seconds must be above "
                                    "0, --kills not below\n")
    return report_and_exit(parser, lambda: run(args.nodes, args.seconds, args.kills,
                                               args.replicas, args.groups, args.rate,
                                               args.seed, modes=store_modes(args)),
                           print_table, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
