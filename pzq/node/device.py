"""The event loop: one thread owns every socket and does all the work in wakes.

One wake: read everything waiting (bounded), put all of it and every consumer ACK
into one store batch, write it, ACK the producers of that batch, then deliver as
much as the consumers will take, and answer the monitor.
"""

from __future__ import annotations

import errno
import functools
import time
from collections import deque

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq import sockets
from pzq.archive.tier import ArchiveTier
from pzq.archive.topiclog import ArchiveError
from pzq.cluster.node import Cluster
from pzq.config import Config
from pzq.delivery.areas import OwnArea
from pzq.delivery.state import DeliveryState
from pzq.delivery.window import DeliveryWindow
from pzq.errors import DecodeError, StoreError
from pzq.logs import get_logger
from pzq.node import admin, figures, monitor
from pzq.node.admin import Admin
from pzq.node.counters import Counters
from pzq.node.rates import LatencyWindow, Rates
from pzq.node.scheduler import start_scheduler
from pzq.node.waker import ARCHIVE_FLUSH, HEARTBEAT, REAP, RETENTION, Waker
from pzq.node.zmqio import recv_frames, send_frames
from pzq.protocol import frames as wire
from pzq.security import ClientCurve, KeyPair, start_authenticator
from pzq.store import keyspace, record
from pzq.store.store import Batch, Store

# Stop reading producers while this many ACKs wait for a full producer pipe.
OUTBOX_LIMIT = 200_000
MONITOR_BATCH = 64
POLL_RETRY_MS = 5  # how soon to retry ACKs a full producer pipe refused
RETENTION_PERIOD_US = 60_000_000  # look for expired archive segments once a minute
STOP_FLUSH_SECONDS = 2.0

log = get_logger("pzq.node.device")

# A stored producer message: routing id, producer msg id, seq, stored record.
Accepted = tuple[bytes, bytes, int, bytes]


def heartbeat_period_us(timeout_nodes_us: int) -> int:
    """Several heartbeats per --timeout-nodes, at least one a second, at most 100 a second."""
    return max(10_000, min(1_000_000, timeout_nodes_us // 4))


def now_us() -> int:
    return time.time_ns() // 1000


class Device:
    def __init__(self, config: Config, store: Store, waker: Waker,
                 curve: KeyPair | None = None) -> None:
        self.config = config
        self.curve = curve  # serve CURVE on every socket when set
        self.store = store
        self.waker = waker
        self.counters = Counters()
        self.delivery = DeliveryState(OwnArea(store), config.ack_timeout,
                                      config.inflight_size, self.counters,
                                      config.max_deliveries, config.delivery_headers)
        self.window = DeliveryWindow(config.prefetch, config.ack_timeout, now_us())
        self.admin = Admin(store, self.snapshot)
        self.rates = Rates(("received", "delivered", "acked"))
        self.rates.sample(time.monotonic(), self.counters)  # the zero every rate starts from
        self.ack_latency = LatencyWindow()
        self.consumers_connected = 0
        self.outbox: deque[list[bytes]] = deque()
        self.endpoints: dict[str, str] = {}
        self.started = time.monotonic()
        self._stop_requested = False
        self._store_failing = False
        self.cluster = (Cluster(config, store, self.counters, self._queue_producer_ack)
                        if config.broadcast_dsn else None)
        self.archive = (ArchiveTier(config)
                        if config.archive_dir else None)
        self.readers: zmq.Socket | None = None
        self._archive_failing = False

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def request_stop(self) -> None:
        """Called from a signal handler: only sets a flag; the waker wakes the loop."""
        self._stop_requested = True

    # -- life cycle ----------------------------------------------------------

    def run(self) -> None:
        """Bind, serve until a stop is requested, then hand back and close."""
        context = zmq.Context()
        bound: list[zmq.Socket] = []
        scheduler = authenticator = None
        try:
            if self.archive is not None:
                self.archive.open()
            if self.curve is not None:
                authenticator = start_authenticator(context, self.config.curve_authorized_keys)
            self.receive = sockets.bind_receive(context, self.config.receive_dsn, self.curve)
            bound.append(self.receive)
            self.send = sockets.bind_send(context, self.config.send_dsn, self.curve)
            bound.append(self.send)
            self.monitor = sockets.bind_monitor(context, self.config.monitor_dsn, self.curve)
            bound.append(self.monitor)
            # Consumers are anonymous to a DEALER: count their connections instead.
            self.send_events = self.send.get_monitor_socket(
                zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
            bound.insert(0, self.send_events)
            self.endpoints = {"receive": sockets.bound_endpoint(self.receive),
                              "send": sockets.bound_endpoint(self.send),
                              "monitor": sockets.bound_endpoint(self.monitor)}
            if self.config.archive_dsn is not None:
                self.readers = sockets.bind(context, zmq.ROUTER, self.config.archive_dsn,
                                            "--archive-dsn", self.curve)
                bound.append(self.readers)
                self.endpoints["archive"] = sockets.bound_endpoint(self.readers)
            ticks = {REAP: self.config.reaper_frequency}
            if self.archive is not None:
                ticks[ARCHIVE_FLUSH] = self.config.flush_interval * 1000
                ticks[RETENTION] = RETENTION_PERIOD_US
            if self.cluster is not None:
                self.cluster.open(context, functools.partial(sockets.bind, curve=self.curve),
                                  ClientCurve(self.curve, self.curve.public)
                                  if self.curve else None)
                bound.extend(self.cluster.sockets())
                self.endpoints["cluster"] = sockets.bound_endpoint(self.cluster.router)
                ticks[HEARTBEAT] = heartbeat_period_us(self.config.timeout_nodes)
            scheduler = start_scheduler(self.waker, ticks)
            log.info("node_ready", node_id=self.store.node_id.decode(),
                     messages=self.store.messages, **self.endpoints)
            self._serve()
            self._flush_outbox_before_exit()
        finally:
            if scheduler is not None:
                scheduler.shutdown(wait=False)
            for socket in bound:
                socket.close()
            if authenticator is not None:
                authenticator.stop()
            context.term()
            if self.archive is not None:
                self.archive.close()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.waker.fileno(), zmq.POLLIN)
        poller.register(self.monitor, zmq.POLLIN)
        poller.register(self.send_events, zmq.POLLIN)
        if self.readers is not None:
            poller.register(self.readers, zmq.POLLIN)
        for socket in self.cluster.sockets() if self.cluster else ():
            poller.register(socket, zmq.POLLIN)
        if self.cluster is not None:
            self.cluster.heartbeat(time.monotonic())
        while not self._stop_requested:
            self._update_interest(poller)
            self._wake(dict(poller.poll(self._poll_timeout_ms())))
        self._finish_replication(poller)

    def _finish_replication(self, poller: zmq.Poller) -> None:
        """At stop, producers whose copies are pending still get their one ACK: wait a
        little for the peers' confirmations, then answer REPLICATION_FAILED."""
        if self.cluster is None:
            return
        give_up = time.monotonic() + STOP_FLUSH_SECONDS
        while self.cluster.next_deadline() is not None and time.monotonic() < give_up:
            self._update_interest(poller)
            self._wake(dict(poller.poll(self._poll_timeout_ms())))
        self.cluster.fail_replication()

    def _poll_timeout_ms(self) -> int | None:
        """Wake for ACKs to retry and for replication deadlines; else only on events."""
        timeouts = [POLL_RETRY_MS] if self.outbox else []
        deadline = self.cluster.next_deadline() if self.cluster else None
        if deadline is not None:
            timeouts.append(max(0, int((deadline - time.monotonic()) * 1000) + 1))
        return min(timeouts) if timeouts else None

    def _update_interest(self, poller: zmq.Poller) -> None:
        """Poll for what there is room and work for, so the loop never spins."""
        taking = len(self.outbox) < OUTBOX_LIMIT and not self._stop_requested
        poller.register(self.receive, zmq.POLLIN if taking else 0)
        delivering = not self._stop_requested and self._has_delivery_work(time.monotonic())
        wants_out = zmq.POLLOUT if delivering else 0
        poller.register(self.send, zmq.POLLIN | wants_out)

    def _flush_outbox_before_exit(self) -> None:
        deadline = time.monotonic() + STOP_FLUSH_SECONDS
        while self.outbox and time.monotonic() < deadline:
            self._flush_outbox()
            if self.outbox:
                time.sleep(POLL_RETRY_MS / 1000)  # pacing a retry, not synchronising
        log.info("node_stopping", unsent_producer_acks=len(self.outbox),
                 messages=self.store.messages, inflight=len(self.delivery.inflight))

    # -- one wake ------------------------------------------------------------

    def _delivery_states(self, monotonic: float) -> list[DeliveryState]:
        """Own messages first (once the cluster lets us), then taken-over ones."""
        states = []
        if self.cluster is None or self.cluster.own_delivery_allowed(monotonic):
            states.append(self.delivery)
        if self.cluster is not None:
            states.extend(self.cluster.takeovers.values())
        return states

    def _has_delivery_work(self, monotonic: float) -> bool:
        states = self._delivery_states(monotonic)
        return (any(state.has_work() for state in states)
                and self.window.room(self._unacked()) > 0)

    def _unacked(self) -> int:
        takeovers = self.cluster.takeovers.values() if self.cluster else ()
        return len(self.delivery.inflight) + sum(len(state.inflight) for state in takeovers)

    def _deliver(self, now: int, monotonic: float) -> None:
        """As much as the consumers take and the delivery window allows."""
        for state in self._delivery_states(monotonic):
            if not state.has_work():
                continue
            room = self.window.room(self._unacked())
            if room == 0:
                return
            state.deliver(self._send_delivery, now, min(room, self.config.batch_size))

    def _wake(self, events: dict) -> None:
        now, monotonic = now_us(), time.monotonic()
        if self.waker.fileno() in events:
            self._on_ticks(self.waker.drain(), now, monotonic)
        batch = self.store.new_batch()
        self.delivery.prepare(batch)
        if self.cluster is not None:
            self.cluster.prepare(batch)
            self.cluster.handle(events, batch, self.delivery, monotonic)
        accepted: list[Accepted] = []
        acked_own: list[int] = []
        if events.get(self.receive, 0) & zmq.POLLIN and not self._stop_requested:
            self._take_produces(batch, accepted, now)
        if events.get(self.send, 0) & zmq.POLLIN:
            answered = self.counters.acked + self.counters.nacked
            self._take_consumer_acks(batch, acked_own, now, monotonic)
            self.window.acked(self.counters.acked + self.counters.nacked - answered)
        self._archive_dead_letters(now)
        if batch.operations:
            self._commit(batch, accepted, acked_own, monotonic)
        if self.cluster is not None:
            self.cluster.expire_replication(monotonic)
            self.cluster.flush()
        if self.outbox:
            self._flush_outbox()
        self.window.update(now)
        if not self._stop_requested:
            self._deliver(now, monotonic)
        if events.get(self.send_events, 0) & zmq.POLLIN:
            self._count_consumers()
        if self.readers is not None and events.get(self.readers, 0) & zmq.POLLIN:
            self.archive.answer_readers(self.readers)
        self.rates.sample(monotonic, self.counters)
        if events.get(self.monitor, 0) & zmq.POLLIN:
            self._answer_monitor()

    def _count_consumers(self) -> None:
        while self.send_events.poll(0):
            event = recv_monitor_message(self.send_events)["event"]
            self.consumers_connected += 1 if event == zmq.EVENT_ACCEPTED else -1

    def _on_ticks(self, reasons: bytes, now: int, monotonic: float) -> None:
        if REAP in reasons:
            expired = self.delivery.reap(now)
            for state in self.cluster.takeovers.values() if self.cluster else ():
                expired += state.reap(now)
            self.window.expired(expired)
        if HEARTBEAT in reasons and self.cluster is not None:
            self.cluster.heartbeat(monotonic)
        if self.archive is not None:
            try:
                if ARCHIVE_FLUSH in reasons:
                    self.archive.tick()
                if RETENTION in reasons:
                    self.archive.apply_retention()
            except ArchiveError as exc:
                self._archive_failed(exc)

    def _take_produces(self, batch: Batch, accepted: list[Accepted], now: int) -> None:
        for _ in range(self.config.batch_size):
            try:
                frames = recv_frames(self.receive)
            except zmq.Again:
                return
            self.counters.received += 1
            try:
                produce = wire.decode_produce(frames, self.config.max_message_size)
                self._check_room(batch, produce)
            except wire.ProduceRefused as bad:
                self._reject(bad)
                continue
            except DecodeError:
                continue  # a ROUTER always prepends the routing id; nothing to answer
            value = record.encode(produce.msg_id, produce.headers, produce.parts, now)
            seq = batch.add_message(value)
            accepted.append((produce.routing_id, produce.msg_id, seq, value))

    def _check_room(self, batch: Batch, produce: wire.Produce) -> None:
        """Refuse, never drop, once the queue is at --max-messages or --max-bytes."""
        limit_messages, limit_bytes = self.config.max_messages, self.config.max_bytes
        full = ((limit_messages and self.store.messages + batch.message_delta >= limit_messages)
                or (limit_bytes and self.store.bytes + batch.byte_delta >= limit_bytes))
        if full:
            self.counters.queue_full += 1
            raise wire.ProduceRefused(wire.QUEUE_FULL.decode(), produce.routing_id,
                                        produce.msg_id)

    def _reject(self, bad: wire.ProduceRefused) -> None:
        self.counters.rejected += 1
        log.debug("producer_message_rejected", reason=bad.reason, msg_id=bad.msg_id.hex())
        self._queue_producer_ack(bad.routing_id, bad.msg_id, False, bad.reason.encode())

    def _take_consumer_acks(self, batch: Batch, acked_own: list[int], now: int,
                            monotonic: float) -> None:
        for _ in range(self.config.batch_size):
            try:
                frames = recv_frames(self.send)
            except zmq.Again:
                return
            try:
                key, ok = wire.decode_consumer_ack(frames)
                node_id, seq = keyspace.parse_message_key(key)
            except DecodeError as exc:
                self.counters.bad_consumer_acks += 1
                log.debug("consumer_ack_malformed", reason=str(exc))
                continue
            state = self._state_for(node_id)
            if ok and state is not None and not self._archive(state, batch, key, seq, now):
                continue  # not archived, so not removed: it will be delivered again
            if node_id != self.store.node_id:
                if self.cluster is None:
                    self.counters.unknown_acks += 1
                    known = False
                else:
                    known = self.cluster.takeover_ack(batch, node_id, seq, ok)
            elif ok:
                entry = self.delivery.ack(batch, seq)
                known = entry is not None
                if entry is not None:
                    acked_own.append(seq)
                    if entry.sent_us:
                        self.ack_latency.add(monotonic, (now - entry.sent_us) / 1e6)
            else:
                known = self.delivery.nack(seq)
            if not known:
                log.debug("consumer_ack_unknown", key=key.decode(), status=ok)

    def _state_for(self, node_id: bytes) -> DeliveryState | None:
        if node_id == self.store.node_id:
            return self.delivery
        return self.cluster.takeovers.get(node_id) if self.cluster is not None else None

    def _archive(self, state: DeliveryState, batch: Batch, key: bytes, seq: int,
                 now: int) -> bool:
        """Append an acked message to the archive; False if that failed."""
        if self.archive is None:
            return True
        entry = state.peek(batch, seq)
        if entry is None:
            return True  # unknown: nothing to archive, the ACK path counts it
        try:
            self.archive.append(key, entry.value, entry.first_delivered_us, entry.deliveries,
                                now, state.area.node_id.decode())
        except ArchiveError as exc:
            self._archive_failed(exc)
            return False
        if self._archive_failing:
            self._archive_failing = False
            log.warning("archive_write_recovered")
        return True

    def _archive_dead_letters(self, now: int) -> None:
        """Poison messages go to the archive with their history, as they leave delivery;
        the holders of a taken-over one drop their copies."""
        takeovers = self.cluster.takeovers.values() if self.cluster else ()
        for state in (self.delivery, *takeovers):
            dead, state.newly_dead = state.newly_dead, []
            origin = state.area.node_id
            if dead and origin != self.store.node_id and self.cluster is not None:
                self.cluster.dead_lettered(origin, [entry.seq for entry in dead])
            for entry in dead if self.archive is not None else ():
                try:
                    self.archive.append(keyspace.message_key(origin, entry.seq), entry.value,
                                        entry.first_delivered_us, entry.deliveries, now,
                                        origin.decode(), outcome="dead_letter")
                except ArchiveError as exc:
                    self._archive_failed(exc)  # still kept in the store's dead letters

    def _archive_failed(self, exc: Exception) -> None:
        self.archive.failures += 1
        if not self._archive_failing:  # once per failing spell
            self._archive_failing = True
            log.error("archive_write_failed", error=str(exc))

    def _commit(self, batch: Batch, accepted: list[Accepted], acked_own: list[int],
                monotonic: float) -> None:
        try:
            if self.archive is not None:
                self.archive.before_commit()
            batch.write()
        except (StoreError, ArchiveError) as exc:
            self._store_write_failed(accepted, str(exc))
            return
        if self._store_failing:
            self._store_failing = False
            log.warning("store_write_recovered")
        self.counters.stored += len(accepted)
        if self.cluster is not None:
            self.cluster.written()
            self.cluster.removed_own(acked_own)
            if self.config.replicas and accepted:
                self.cluster.replicate(accepted, monotonic)
                return
        for routing_id, msg_id, _, _ in accepted:
            self._queue_producer_ack(routing_id, msg_id, True, b"")

    def _queue_producer_ack(self, routing_id: bytes, msg_id: bytes, ok: bool,
                            status: bytes) -> None:
        if not ok:
            self.counters.acks_failed += 1
        elif status == wire.REPLICATION_FAILED:
            self.counters.acks_replication_failed += 1
        else:
            self.counters.acks_ok += 1
        self.outbox.append(wire.encode_producer_ack(routing_id, msg_id, ok, status))

    def _store_write_failed(self, accepted: list[Accepted], reason: str) -> None:
        if not self._store_failing:  # once per failing spell, not once per wake
            self._store_failing = True
            log.error("store_write_failed", error=reason, refused=len(accepted))
        self.delivery.write_failed()
        if self.cluster is not None:
            self.cluster.write_failed()
        self.counters.store_failures += len(accepted)
        status = f"not stored: {reason}".encode()
        for routing_id, msg_id, _, _ in accepted:
            self._queue_producer_ack(routing_id, msg_id, False, status)

    def _flush_outbox(self) -> None:
        """Send waiting producer ACKs; keep those a full pipe refused for the next wake."""
        refused: deque[list[bytes]] = deque()
        while self.outbox:
            frames = self.outbox.popleft()
            try:
                send_frames(self.receive, frames)
                self.counters.producer_acks_sent += 1
            except zmq.Again:
                refused.append(frames)
            except zmq.ZMQError as exc:
                if exc.errno != errno.EHOSTUNREACH:
                    raise
                self.counters.producer_acks_dropped += 1  # that producer is gone
        self.outbox = refused

    def _send_delivery(self, frames: list[bytes]) -> bool:
        try:
            send_frames(self.send, frames)
        except zmq.Again:
            return False
        return True

    # -- monitor ---------------------------------------------------------------

    def _answer_monitor(self) -> None:
        for _ in range(MONITOR_BATCH):
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.counters.monitor_requests += 1
            try:
                envelope, verb, arguments = wire.decode_monitor_request(frames)
            except DecodeError as exc:
                envelope, reply = frames[:1], f"ERROR: {exc}".encode()
            else:
                reply = (self.admin.answer(verb, arguments) if verb in admin.VERBS
                         else monitor.answer(verb, self.snapshot()))
            try:
                self.monitor.send_multipart(wire.encode_monitor_reply(envelope, reply),
                                            zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # the asker is gone or not reading; a monitor reply is not owed

    def snapshot(self) -> dict[str, object]:
        return figures.node_figures(self)
