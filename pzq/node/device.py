"""The order of one wake. Every part owns its state and its socket; this only says
what happens when.

One wake: act on the scheduler's ticks; read everything waiting (bounded) from the
cluster, the producers and the consumers into one store batch; write it; ACK the
producers of that batch (or send their messages to the peers first); deliver as
much as the consumers will take and the window allows; answer the monitor.
"""

from __future__ import annotations

import json
import math

import zmq

from pzq import sockets
from pzq.admin.monitor import Monitor
from pzq.admin.node_admin import Admin
from pzq.admin.topic_admin import TopicAdmin
from pzq.clock import Now
from pzq.errors import PzqError, StoreUnrecoverable
from pzq.logs import get_logger
from pzq.node.figures import node_figures
from pzq.node.intake import Intake
from pzq.node.outbox import RETRY_MS, ProducerAcks
from pzq.node.registry import Wiring, close_parts, first, open_parts, the
from pzq.node.state import NodeState
from pzq.node.topic_figures import topic_figures
from pzq.node.topic_rates import TopicRates
from pzq.node.waker import Waker
from pzq.parts import Figures, Part, merge_figures
from pzq.security import NodeSecurity
from pzq.serving.answers import GroupAnswers
from pzq.serving.consume_endpoint import ConsumeEndpoint, NamedGroups, NoConsumeEndpoint
from pzq.serving.send_endpoint import SendEndpoint
from pzq.store.record import Stored
from pzq.store.store import Batch
from pzq.zmqio import POLLIN, Context, Events, Socket

log = get_logger("pzq.device")
PACED_INTAKE = 16  # messages a wake takes while consumers are behind (a batch: whole)


class Device:
    """Binds the producers' socket, every part that is on (pzq.node.registry) and the
    monitor, or closes what it bound and raises (BindError)."""

    def __init__(self, node: NodeState, waker: Waker, context: Context,
                 security: NodeSecurity) -> None:
        config = node.config
        self.node = node
        self.waker = waker
        self.stopping = False
        self.receive = sockets.bind_receive(context, config.receive_dsn, security)
        self.producer_acks = ProducerAcks(self.receive, node.counters)
        self.intake = Intake(self.receive, config.intake, node.store, node.counters,
                             self.producer_acks, node.topics, node.dedup, node.routes)
        answers = GroupAnswers(node.archiving, node.cluster.removed)
        self.parts: list[Part] = []
        try:
            self.parts = open_parts(Wiring(context, security, node, answers,
                                           self.producer_acks.replicated, Now.read()))
            self.send = the(self.parts, SendEndpoint)
            self.consume: NamedGroups = first(self.parts, ConsumeEndpoint) or NoConsumeEndpoint()
            self.parts.append(self._monitor(sockets.bind_monitor(context, config.monitor_dsn,
                                                                 security)))
        except BaseException:
            self.close()
            raise
        self.topic_rates = TopicRates()
        self._store_failing = False

    def _monitor(self, socket: Socket) -> Monitor:
        node = self.node
        admin = Admin(node.store, self.figures, node.requeued,
                      lambda messages: node.copy_requeued(messages, Now.read().mono))
        monitor = Monitor(socket, self.figures, admin, node.counters)
        monitor.verbs[b"ROUTES"] = lambda arguments: json.dumps(
            node.routes.table(Now.read().mono), sort_keys=True).encode()
        monitor.verbs.update(TopicAdmin(node.store, node.topics, self.consume, node.delivery,
                                        Now.read, self._tell_holders)
                             .verbs(monitor.verbs[b"PENDING"]))
        return monitor

    def bound(self) -> dict[str, str]:
        """The endpoints actually bound (wildcard ports resolved), for node_ready."""
        named = {"receive": self.receive}
        for part in self.parts:
            named.update(part.bound())
        return {name: sockets.bound_endpoint(socket) for name, socket in named.items()}

    def polled(self) -> list[Socket | int]:
        return [polled for part in self.parts for polled in part.polled()]

    def ticks(self) -> dict[bytes, int]:
        """The scheduler's wake-ups the parts need: reason -> period in µs."""
        return {reason: period for part in self.parts for reason, period in part.ticks().items()}

    def start(self, now: Now) -> None:
        for part in self.parts:
            part.start(now)

    def close(self) -> None:
        close_parts(self.parts)
        self.receive.close()

    def _tell_holders(self, batch: Batch, removed: list[int], group: str,
                      done: list[int]) -> None:
        self.node.cluster.tell_holders(batch, removed, group, done, Now.read().mono)

    def figures(self) -> Figures:
        now = Now.read()
        mono = now.mono
        figures = node_figures(self.node, len(self.producer_acks),
                               self.send.connections.connected, mono, now.wall_us / 1e6)
        for part in self.parts:
            merge_figures(figures, part.figures(now))
        figures["topics"] = topic_figures(self.node, self.consume, self.topic_rates,
                                          now.wall_us, mono)
        figures["taken_over"] = self.node.cluster.takeovers.figures(now.wall_us)
        return figures

    # -- what to wait for ------------------------------------------------------

    def interest(self, poller: zmq.Poller, now: Now) -> None:
        """Poll for what there is room and work for, so the loop never spins."""
        taking = not self.producer_acks.full and not self.stopping
        poller.register(self.receive, POLLIN if taking else 0)
        for part in self.parts:
            part.interest(poller, now, not self.stopping)

    def poll_timeout_ms(self, now: Now) -> int | None:
        """Wake for ACKs to retry, for replication deadlines and for the store's timed
        sync; else only on events."""
        timeouts = [RETRY_MS] if self.producer_acks else []
        sync_wait = self.node.store.sync_wait_s()  # the store's timed fsync
        if sync_wait is not None:
            timeouts.append(math.ceil(sync_wait * 1000))
        if self.node.topics.backfill_due():
            timeouts.append(0)
        for part in self.parts:
            part_wait = part.timeout_ms(now)
            if part_wait is not None:
                timeouts.append(part_wait)
        return min(timeouts) if timeouts else None

    # -- one wake ----------------------------------------------------------------

    def wake(self, events: Events, now: Now) -> None:
        if self.waker.fileno() in events:
            self._on_ticks(self.waker.drain(), now)
        self.node.wake_at(now)
        batch = self.node.store.begin()
        accepted = self._take(events, batch, now)
        self._commit(batch, accepted, now)
        if self.node.topics.backfill_due():
            self.node.topics.backfill()  # a chunk a wake: a new group's older messages
        self._send_out(events, now)
        self._answer(events, now)

    def _take(self, events: Events, batch: Batch, now: Now) -> list[Stored]:
        """Everything waiting, into the batch: cluster traffic, producer messages,
        consumer ACKs, then what those retire (dead letters, copies to remove)."""
        node = self.node
        accepted: list[Stored] = []
        for part in self.parts:
            part.take(events, batch, now)
        if events.get(self.receive, 0) & POLLIN and not self.stopping:
            accepted = self.intake.take(batch, now, self._intake_pace())
        node.cluster.owe_removes(batch, now.mono)
        return accepted

    def _intake_pace(self) -> int:
        """While consumers are connected and stored messages wait for them, a wake takes
        a produce batch or PACED_INTAKE messages, then delivers: the one thread then
        shares its time between the two, and a message waits behind a short backlog
        instead of the run of what producers sent ahead (end-to-end latency). Under
        --hard-sync a wake's fsync is shared by as many messages as came: no pace."""
        if self.node.config.hard_sync or not any(part.backlogged() for part in self.parts):
            return 0
        return PACED_INTAKE

    def _send_out(self, events: Events, now: Now) -> None:
        """After the write: the batch's producer ACKs at once, then each part's (the
        cluster's frames, the deliveries, the archive's fsync), then the producer ACKs
        the cluster completed meanwhile (copies confirmed, or their deadline passed)."""
        self.producer_acks.flush()
        for part in self.parts:
            part.send_out(events, now, not self.stopping)
        self.producer_acks.flush()

    def _answer(self, events: Events, now: Now) -> None:
        """Figures and questions last: rates, then each part's (archive readers, the
        ZPER broker, the monitor)."""
        node = self.node
        node.rates.sample(now.mono, node.counters)
        self.topic_rates.sample(now.mono, node.topics, self.consume)
        for part in self.parts:
            part.answer(events, now)

    def _on_ticks(self, reasons: bytes, now: Now) -> None:
        for part in self.parts:
            part.on_ticks(reasons, now)

    def _commit(self, batch: Batch, accepted: list[Stored], now: Now) -> None:
        node = self.node
        try:
            node.store.commit(batch)
        except StoreUnrecoverable as exc:
            self.intake.not_stored(accepted, str(exc))
            self.producer_acks.flush()
            raise  # the node stops: see StoreUnrecoverable
        except PzqError as exc:
            if not self._store_failing:  # once per failing spell, not once per wake
                self._store_failing = True
                log.error("store_write_failed", error=str(exc), refused=len(accepted))
            self.intake.not_stored(accepted, str(exc))
            return
        if self._store_failing:
            self._store_failing = False
            log.warning("store_write_recovered")
        node.counters.stored += len(accepted)
        if node.config.replicas and accepted:
            node.cluster.replicate(accepted, now.mono)
        else:
            self.intake.stored(accepted)

    # -- stopping ----------------------------------------------------------------

    def finish_replication(self) -> bool:
        """True while producer ACKs wait for copies (a stopping node waits a little)."""
        return self.node.cluster.next_deadline() is not None

    def fail_replication(self) -> None:
        self.producer_acks.replicated(self.node.cluster.fail_all())

    def hand_back(self, seconds: float) -> None:
        self.producer_acks.flush_before_exit(seconds)
        node = self.node
        log.info("node_stopping", unsent_producer_acks=len(self.producer_acks),
                 producer_acks_sent=node.counters.producer_acks_sent,
                 messages=node.store.messages, inflight=len(node.delivery.inflight))

