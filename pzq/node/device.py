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

from pzq.admin.monitor import Monitor
from pzq.admin.node_admin import Admin
from pzq.admin.topic_admin import TopicAdmin
from pzq.archive.archiving import Archiving
from pzq.archive.part import ArchivePart
from pzq.clock import Now
from pzq.cluster.part import ClusterPart
from pzq.cluster.replication import PendingAck
from pzq.errors import PzqError, StoreUnrecoverable
from pzq.logs import get_logger
from pzq.node.endpoints import Endpoints
from pzq.node.figures import node_figures
from pzq.node.intake import Intake
from pzq.node.outbox import RETRY_MS, ProducerAcks
from pzq.node.state import NodeState
from pzq.node.topic_figures import topic_figures
from pzq.node.topic_rates import TopicRates
from pzq.node.waker import Waker
from pzq.node.zper import ZperBroker
from pzq.parts import Part
from pzq.protocol.frames import REPLICATION_FAILED
from pzq.serving.answers import GroupAnswers
from pzq.serving.consume_endpoint import (
    ConsumeEndpoint,
    NamedGroups,
    NoConsumeEndpoint,
)
from pzq.serving.holding import GroupDelivery
from pzq.serving.send_endpoint import SendEndpoint
from pzq.store.record import Stored
from pzq.store.store import Batch
from pzq.store.topics import DEFAULT_GROUP
from pzq.zmqio import POLLIN, Events

log = get_logger("pzq.device")


class Device:
    def __init__(self, node: NodeState, endpoints: Endpoints, waker: Waker) -> None:
        config = node.config
        self.node = node
        self.endpoints = endpoints
        self.waker = waker
        self.stopping = False
        self.producer_acks = ProducerAcks(endpoints.receive, node.counters)
        self.intake = Intake(endpoints.receive, config.intake, node.store, node.counters,
                             self.producer_acks, node.topics, node.dedup, node.routes)
        answers = GroupAnswers(node.archiving, node.cluster.removed)
        self.send = _send_endpoint(node, endpoints, answers)
        admin = Admin(node.store, self.figures, node.requeued,
                      lambda messages: node.copy_requeued(messages, Now.read().mono))
        self.monitor = Monitor(endpoints.monitor, endpoints.quiet_monitor, self.figures, admin,
                               node.counters)
        self.monitor.verbs[b"ROUTES"] = lambda arguments: json.dumps(
            node.routes.table(Now.read().mono), sort_keys=True).encode()
        consume = _consume_endpoint(node, endpoints, answers)
        self.consume: NamedGroups = consume or NoConsumeEndpoint()
        self.monitor.verbs.update(TopicAdmin(node.store, node.topics, self.consume,
                                             node.delivery, Now.read,
                                             self._tell_holders)
                                  .verbs(self.monitor.verbs[b"PENDING"]))
        archiving = node.archiving  # its loop parts need it on (ZPER needs --archive-dir)
        self.zper = (ZperBroker(archiving.tier.archive, endpoints.zper,
                                config.archive_topic, config.batch_size, Now.read().mono)
                     if endpoints.zper is not None and isinstance(archiving, Archiving) else None)
        # The parts the loop asks in turn, those that are on. The cluster first (peers'
        # frames before the consumers'); the archive before the groups (it learns the
        # wake's time before their ACKs append) and before the ZPER broker (its fsync
        # before the broker says what is durable); ``default`` before the named groups
        # (its reaper tick reaps the takeovers before any group reaps its own); the
        # monitor last.
        cluster = (ClusterPart(endpoints.cluster, node.delivery, self._replicated)
                   if endpoints.cluster is not None else None)
        archive = (ArchivePart(archiving, endpoints.readers)
                   if isinstance(archiving, Archiving) else None)
        self.parts: list[Part] = [part for part in (cluster, archive, self.send, consume,
                                                    self.zper, self.monitor)
                                  if part is not None]
        self.topic_rates = TopicRates()
        self._store_failing = False

    def _tell_holders(self, batch: Batch, removed: list[int], group: str,
                      done: list[int]) -> None:
        self.node.cluster.tell_holders(batch, removed, group, done, Now.read().mono)

    def figures(self) -> dict[str, object]:
        now = Now.read()
        mono = now.mono
        figures = node_figures(self.node, len(self.producer_acks),
                               self.send.connections.connected, mono, now.wall_us / 1e6)
        if self.zper is not None:
            figures["zper"] = self.zper.snapshot(mono)
        figures["topics"] = topic_figures(self.node, self.consume, self.topic_rates,
                                          now.wall_us, mono)
        figures["taken_over"] = self.node.cluster.takeovers.figures(now.wall_us)
        return figures

    # -- what to wait for ------------------------------------------------------

    def interest(self, poller: zmq.Poller, now: Now) -> None:
        """Poll for what there is room and work for, so the loop never spins."""
        taking = not self.producer_acks.full and not self.stopping
        poller.register(self.endpoints.receive, POLLIN if taking else 0)
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
        node, endpoints = self.node, self.endpoints
        accepted: list[Stored] = []
        for part in self.parts:
            part.take(events, batch, now)
        if events.get(endpoints.receive, 0) & POLLIN and not self.stopping:
            accepted = self.intake.take(batch, now)
        node.cluster.owe_removes(batch, now.mono)
        return accepted

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

    def _replicated(self, done: list[PendingAck]) -> None:
        """Producer ACKs that waited for copies: all confirmed, or the deadline passed."""
        for ack in done:
            self.producer_acks.owe(ack.routing_id, ack.msg_id, True,
                                   b"" if ack.replicated else REPLICATION_FAILED)

    # -- stopping ----------------------------------------------------------------

    def finish_replication(self) -> bool:
        """True while producer ACKs wait for copies (a stopping node waits a little)."""
        return self.node.cluster.next_deadline() is not None

    def fail_replication(self) -> None:
        self._replicated(self.node.cluster.fail_all())

    def hand_back(self, seconds: float) -> None:
        self.producer_acks.flush_before_exit(seconds)
        node = self.node
        log.info("node_stopping", unsent_producer_acks=len(self.producer_acks),
                 producer_acks_sent=node.counters.producer_acks_sent,
                 messages=node.store.messages, inflight=len(node.delivery.inflight))


def _send_endpoint(node: NodeState, endpoints: Endpoints,
                   answers: GroupAnswers) -> SendEndpoint:
    """``default``: own messages, and down nodes' this node took over."""
    cluster = node.cluster
    deliveries = GroupDelivery(DEFAULT_GROUP, node.delivery, lambda: cluster.takeovers.states,
                               node.latency)
    return SendEndpoint(endpoints.send, endpoints.consumers, deliveries, answers, node.window,
                        node.counters, node.config.batch_size, node.reap,
                        cluster.own_delivery_allowed)


def _consume_endpoint(node: NodeState, endpoints: Endpoints,
                      answers: GroupAnswers) -> ConsumeEndpoint | None:
    if endpoints.consume is None or endpoints.consume_events is None:
        return None
    config = node.config
    cluster = node.cluster
    consume = ConsumeEndpoint(endpoints.consume, endpoints.consume_events, node.store,
                              node.topics, answers, config.delivery,
                              config.consume_heartbeat, config.batch_size,
                              cluster.takeovers.taken)
    # the cluster's word on own messages, both ways (a lone node's: all are its own)
    consume.own_allowed = cluster.own_delivery_allowed
    consume.held_elsewhere = cluster.held_elsewhere
    consume.lowest_held = cluster.lowest_held
    cluster.follow_groups(consume.done_elsewhere, consume.rewind_own)
    return consume
