"""Producer messages into the wake's batch: decoded, checked, refused, stored, or
answered as a duplicate of one stored already (its DEDUP-ID within the window). A
produce batch's messages (pzq.protocol.produce_batches) go the same way, each one
stored from the bytes it came in. Messages sent alone in a row with one shape
(pzq.protocol.alone_runs), like a batch's members with one header group, are
checked once and stored together when their headers ask for no look at each."""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

import zmq

from pzq.authorization import NO_AUTHORIZATION, PRODUCE, Authorization, Rights, produce_refusal
from pzq.clock import Now, wall_us
from pzq.cluster.routes import Routes
from pzq.counters import Counters
from pzq.delivery.expiry import MessageExpiry
from pzq.delivery.lanes import Lanes
from pzq.errors import DecodeError, ProduceRefused, QueueFull
from pzq.logs import get_logger
from pzq.node.batch_acks import OpenBatch
from pzq.node.intake_model import Accepted, HeaderFacts, IntakeLimits, StoredRun, together, unpaced
from pzq.node.outbox import ProducerAcks
from pzq.protocol import alone_runs, frames
from pzq.protocol import produce_batches as batches
from pzq.protocol.batch_runs import MemberRun, member_token
from pzq.protocol.headers import TAG_MAX, dedup_id_of, key_of, topic_and_tag
from pzq.protocol.time_headers import NO_TIMES, message_times
from pzq.store import record
from pzq.store.batch import Batch, Participant
from pzq.store.dedup import DedupIndex
from pzq.store.record import ScheduledStored, Stored
from pzq.store.scheduled import ScheduledArea
from pzq.store.store import Store
from pzq.store.topics import Topic, Topics
from pzq.too_large import TooLargeLog, over_a_limit
from pzq.zmqio import Socket, drain_some

log = get_logger("pzq.intake")
_NEW_TUPLE = tuple.__new__


class Intake(Participant):
    def __init__(self, socket: Socket, limits: IntakeLimits, store: Store,
                 counters: Counters, acks: ProducerAcks, topics: Topics,
                 dedup: DedupIndex, routes: Routes, scheduled: ScheduledArea,
                 expiry: MessageExpiry, lanes: Lanes,
                 authorization: Authorization = NO_AUTHORIZATION,
                 clock: Callable[[], int] = wall_us) -> None:
        self.socket = socket
        # µs since the epoch, read after each chunk is read off the socket: the wake's
        # time was read before its poll and ticks, tens of ms before a message that
        # came since on a loaded host (tests pass their own)
        self.clock = clock
        self.authorization = authorization  # who may produce to which topics
        self.lanes = lanes  # PRIORITY: on a topic with priorities=on
        self.scheduled_area = scheduled  # DELAY:, NOT-BEFORE: until due
        self.expiry = expiry  # TTL:, EXPIRES: in the expiry index
        self.routes = routes
        self.topics = topics
        self.limits = limits
        self.store = store
        self.counters = counters
        self.acks = acks
        self.dedup = dedup
        self.too_large = TooLargeLog("receive")  # refusals of a size, logged rate-limited
        # Repeats of a message in the batch being built: answered once it is written.
        self._repeats: list[tuple[bytes, bytes]] = []
        self.idle = True  # (Participant) until the batch being built holds a repeat
        # Scheduled messages in the batch being built: ACKed (or copied) once written
        # (asked only when there are some: pzq.node.intake_part).
        self.scheduled: list[ScheduledStored] = []
        # Whether any limit of room is set node-wide (a topic's own are looked at each)
        self._room_limited = bool(limits.max_messages or limits.max_bytes)
        # What each header group said this take (a topic can go between takes)
        self._known: dict[tuple[bytes, ...], HeaderFacts] = {}
        self._run = StoredRun(topics)  # stored, not yet in the topic's log and counts
        # Whether the next take asks the socket if a second message waits (a poll of
        # it without a wait, some 3 100 instructions and three system calls): not on
        # the take of the wake right after one whose take read one message sent alone
        # (no produce batch) and found none behind it (a producer at window 1 sends
        # the next once ACKed); the loop's poll sees one that came meanwhile, and the
        # take after looks again, as does the first after a wake that took nothing
        # (pzq.node.intake_part).
        self.look = True
        store.register(self)

    def take(self, batch: Batch, now: Now, pace: int = 0,
             paced: Callable[[], int] = unpaced) -> Accepted:
        """Read what producers sent into ``batch``; refusals are answered at once.
        ``pace``: once this many messages came, or a produce batch (taken whole), the
        take asks ``paced()`` how many messages the wake takes in all (asked once, and
        only by a take that came so far): 0, no pace (up to --batch-size frames); else
        it stops there, or after the batch that passed it (whole). Read in chunks, each
        ending where the pace is looked at: once it is reached, or after a batch.

        A chunk's time (its records' stored time, its DELAYs' and TTLs' start, its
        DEDUP-IDs' window) is the clock read after the chunk was read, or the wake's
        ``now`` if later: every message of the chunk came before it, and the times of a
        take's chunks never go back."""
        now_us = now.wall_us
        self._mono = now.mono
        self._known = {}
        accepted = Accepted()
        start = self.counters.received
        stop_at = start + pace if pace else None
        asked = drained = lone = False
        left = self.limits.batch_size
        while left > 0:
            want = left if stop_at is None else min(left, stop_at - self.counters.received)
            rights = self.authorization.shared()  # (None: each message's own, by its frame)
            firsts, raws, drained = drain_some(self.socket, want, self.limits.batch_size - left,
                                               None if stop_at is None else batches.BATCH,
                                               rights is None, self.look)
            left -= len(raws)
            now_us = self._chunk_time(now_us)  # (one clock read a chunk)
            if len(raws) == 1 and rights is not None and not (
                    len(raws[0]) > 2 and raws[0][2].startswith(batches.BATCH)):
                lone = True
                if not self._take_bare(batch, raws[0], now_us, accepted, rights):
                    self._take_singles(batch, raws, 0, now_us, accepted, rights)  # (a wake's one)
            else:
                self._take_messages(batch, rights, firsts, raws, now_us, accepted)
            if drained:
                break
            if stop_at is not None and (self.counters.received >= stop_at
                                        or batches.is_batch(raws[-1])):
                if not asked:
                    asked, whole = True, paced()
                    if not whole:
                        stop_at = None
                        continue
                    stop_at = start + whole
                if self.counters.received >= stop_at:  # (a batch that passed it: whole)
                    break
        self.look = not (lone and self.look and drained
                          and left == self.limits.batch_size - 1)
        if self._run.topic is not None:  # (a wake's one message is in its topic already)
            self._run.flush(batch)
        return accepted

    def _chunk_time(self, now_us: int) -> int:
        """The time of a chunk just read: the clock's, or the take's time so far if
        later. The header facts read before it are read again (their due times and
        expiries counted from an earlier time)."""
        read_us = self.clock()
        if read_us <= now_us:
            return now_us
        if self._known:
            self._known = {}
        return read_us

    def _take_bare(self, batch: Batch, raw: list[bytes], now_us: int, accepted: Accepted,
                   rights: Rights) -> bool:
        """A wake's one message with no header and one part (what the original
        protocol's producers send: ``[routing id][msg id][empty][body]``) stored in one
        call, when nothing asks a look at it: within the limits of size, to ``default``
        as it is (known, not partitioned, no limit of room, node-wide or its own), from
        a producer who may produce anywhere, and no run noted before it. What
        ``_take_singles`` would do with it, without its decode, its header facts and
        ``_store_plain``'s call; False: not such a message, nothing done (the general
        way takes it)."""
        if len(raw) != 4 or raw[2] or not rights.produces_anywhere \
                or self._run.topic is not None:
            return False
        body, msg_id = raw[3], raw[1]
        topic = self.topics.topics.get(self.topics.default_topic)
        if topic is None or topic.partitions or self._room_limited or topic.max_messages \
                or topic.max_bytes or len(body) > self.limits.max_message_size \
                or len(msg_id) > frames.MSG_ID_MAX:
            return False
        self.counters.received += 1
        value = record.encode_bare(msg_id, body, now_us)
        seq = batch.add_message(value)
        self.topics.note_new_run(batch, topic, b"", [seq], len(value))
        accepted.alone.append((raw[0], msg_id, seq, value))
        return True

    def _take_messages(self, batch: Batch, rights: Rights | None, firsts: list[zmq.Frame],
                       raws: list[list[bytes]], now_us: int, accepted: Accepted) -> None:
        """Produce batches, and runs of messages sent alone that share one shape
        (``rights``: every client's, or None when each message's is read from its first
        frame, in ``firsts``)."""
        each_rights = None if rights is not None else list(map(self.authorization.of, firsts))
        at = 0
        while at < len(raws):
            raw = raws[at]
            if each_rights is not None:
                rights = each_rights[at]
            assert rights is not None
            if len(raw) > 2 and raw[2].startswith(batches.BATCH):  # (is_batch, no call)
                self._take_batch(batch, raw, now_us, accepted, rights)
                at += 1
            elif each_rights is not None:  # a run shares its first's rights: not here
                self._take_alone(batch, raw, now_us, accepted, rights)
                at += 1
            else:
                at += self._take_singles(batch, raws, at, now_us, accepted, rights)

    def _take_singles(self, batch: Batch, raws: list[list[bytes]], at: int, now_us: int,
                      accepted: Accepted, rights: Rights) -> int:
        """The message sent alone at ``at``, with those after it of its shape when its
        headers ask for no look at each (pzq.protocol.alone_runs): stored together,
        their records, keys and the topic's log made in C; returns how many it took."""
        self.counters.received += 1  # (``_decoded``, without its call)
        try:
            produce = frames.decode_produce(raws[at], self.limits.max_message_size)
        except ProduceRefused as refused:
            self._refuse(refused)
            return 1
        except DecodeError:
            return 1  # a ROUTER always prepends the routing id; nothing to answer
        if batches.PROTOCOL_HEADER in produce.headers:
            self._accept(batch, self._asking(produce), now_us, accepted.alone, rights)
            return 1
        try:
            facts = self._read_headers(produce, now_us, rights)
        except ProduceRefused as refused:
            self._refuse(refused)
            return 1
        count = alone_runs.run_length(raws, at, produce.headers) \
            if at + 1 < len(raws) and facts.plain else 1
        if count == 1:  # (a wake of one message, mostly: no run's few calls)
            if facts.plain and self._run.topic is None:  # (no checks; nothing before it)
                self._store_plain(batch, produce, facts, now_us, accepted.alone)
            else:
                self._accept(batch, produce, now_us, accepted.alone, rights, facts=facts)
            return 1
        run = raws[at:at + count]
        parts_at = 3 + len(produce.headers)
        if max(alone_runs.body_sizes(run, parts_at)) > self.limits.max_message_size \
                or max(map(len, map(alone_runs.MSG_ID, run))) > frames.MSG_ID_MAX:
            self._accept(batch, produce, now_us, accepted.alone, rights)
            for raw in run[1:]:  # each refused or taken on its own
                self._take_alone(batch, raw, now_us, accepted, rights)
            return count
        self.counters.received += count - 1  # (the first: counted when decoded)
        values = alone_runs.records(run, parts_at, produce.headers, record.fixed(now_us))
        size = sum(map(len, values))
        seqs = batch.add_messages(values, size)
        self._run.note_seqs(batch, seqs, facts.topic, facts.tag, size)
        accepted.alone += zip(map(alone_runs.ROUTING_ID, run), map(alone_runs.MSG_ID, run),
                              seqs, values, strict=True)
        return count

    def _take_alone(self, batch: Batch, raw: list[bytes], now_us: int,
                    accepted: Accepted, rights: Rights) -> None:
        """A message sent alone (the original frames)."""
        produce = self._decoded(raw)
        if produce is not None:
            self._accept(batch, self._asking(produce), now_us, accepted.alone, rights)

    def _decoded(self, raw: list[bytes]) -> frames.Produce | None:
        """A message sent alone, counted as received; None when it is refused (answered
        here) or cannot be read."""
        self.counters.received += 1
        try:
            return frames.decode_produce(raw, self.limits.max_message_size)
        except ProduceRefused as refused:
            self._refuse(refused)
        except DecodeError:
            pass  # a ROUTER always prepends the routing id; nothing to answer
        return None

    def _asking(self, produce: frames.Produce) -> frames.Produce:
        """A message that asks whether the node speaks produce batches: its ACK says so,
        and the header that asked is not stored."""
        if batches.PROTOCOL_HEADER not in produce.headers:
            return produce
        self.acks.asked_protocol(produce.routing_id, produce.msg_id)
        return produce._replace(headers=tuple(
            header for header in produce.headers if header != batches.PROTOCOL_HEADER))

    def _take_batch(self, batch: Batch, raw: list[bytes], now_us: int,
                    accepted: Accepted, rights: Rights) -> None:
        """A produce batch: its runs of members (pzq.protocol.batch_runs) each stored
        from their entries as they came; the batch is answered once all are."""
        try:
            members = batches.decode_runs(raw, self.limits.max_message_size)
        except ProduceRefused as refused:
            self.counters.received += 1
            self._refuse(refused)
            return
        count = int(raw[2][len(batches.BATCH):])  # (decode_runs checked it)
        self.counters.received += count
        open_batch = self.acks.batches.expect(raw[0], raw[1], count)
        fixed = record.fixed(now_us)  # (a record's fixed fields: made where runs need them)
        for member in members:
            if isinstance(member, ProduceRefused):
                self._refuse(member)
            else:
                self._take_run(batch, member, open_batch, now_us, accepted, rights, fixed)

    def _take_run(self, batch: Batch, run: MemberRun, open_batch: OpenBatch, now_us: int,
                  accepted: Accepted, rights: Rights, fixed: bytes) -> None:
        """Members in a row with one header group. Stored together (records, keys and
        the topic's log made in C over them) unless their headers ask for a look at
        each: then each is taken as one sent alone."""
        routing_id = open_batch.routing_id
        alone = 0  # where the members taken one by one start (the first: refused)
        # (headers read this take, by a producer who may produce anywhere: no look)
        facts = self._known.get(run.headers) if rights.produces_anywhere else None
        if facts is None:
            try:
                facts = self._read_headers(
                    frames.Produce(routing_id, member_token(open_batch.batch_id, run.first),
                                   run.headers, (), run.body_sizes[0]), now_us, rights)
            except ProduceRefused as refused:
                self._refuse(refused)  # the first; each other one is refused on its own
                alone = 1
        if facts is None or not facts.plain:
            for token, entry, size in islice(zip(run.tokens(open_batch.batch_id),
                                                 run.entries, run.body_sizes, strict=True),
                                             alone, None):
                self._accept(batch, frames.Produce(routing_id, token, run.headers, (), size),
                             now_us, accepted.alone, rights, fixed + entry)
            return
        if run.size:  # (entries of one size: their records made by one join)
            values = record.records_of(fixed, run.entries, run.size)
            size = len(values) * (len(fixed) + run.size)
        else:
            values = list(map(fixed.__add__, run.entries))
            size = sum(map(len, values))
        seqs = batch.add_messages(values, size)
        self._run.note_seqs(batch, seqs, facts.topic, facts.tag, size)
        accepted.runs.append((open_batch, run, seqs, values))
        accepted.in_runs += len(values)

    def _accept(self, batch: Batch, produce: frames.Produce, now_us: int,
                accepted: list[Stored], rights: Rights, value: bytes | None = None,
                facts: HeaderFacts | None = None) -> None:
        """Into the batch, unless refused or a repeat; ``value``: its record, made here
        when not given. ``rights``: its producer's (pzq.authorization); ``facts``: what
        its headers say, when they were read for it already."""
        try:
            if facts is None:
                facts = self._read_headers(produce, now_us, rights)
            topic, tag, dedup_id = facts.topic, facts.tag, facts.dedup_id
            if topic.partitions:
                self._check_partition(produce, facts)
            seen_us = None if dedup_id is None else self.dedup.seen_at(topic.id, dedup_id)
            if dedup_id is not None and seen_us is not None \
                    and self._repeated(produce, topic, dedup_id, seen_us, now_us):
                return
            if facts.room_limited:
                self._check_room(batch, produce, topic)
        except ProduceRefused as refused:
            self._refuse(refused)
            return
        if dedup_id is not None:
            self.dedup.remember(batch, topic.id, dedup_id, now_us, seen_us)
        if value is None:
            value = record.encode(produce.msg_id, produce.headers, produce.parts, now_us)
        if facts.times.due_us > now_us:  # kept apart until due (pzq.store.scheduled)
            seq = batch.take_seq()
            self.scheduled_area.add(batch, topic.name, facts.times.due_us, seq, value)
            self.scheduled.append((produce.routing_id, produce.msg_id, seq,
                                    facts.times.due_us, value))
            return
        seq = batch.add_message(value)
        if facts.times.expires_us or facts.times.priority:
            self._index(batch, facts, seq)
        self._run.note(batch, seq, topic, tag, len(value))
        accepted.append((produce.routing_id, produce.msg_id, seq, value))

    def _store_plain(self, batch: Batch, produce: frames.Produce, facts: HeaderFacts,
                     now_us: int, accepted: list[Stored]) -> None:
        """``_accept`` of a message whose headers ask no look (``facts.plain``: no
        DEDUP-ID, due time, expiry, priority, partition or room to check) when the take
        noted none before it: stored, and in its topic's log and counts at once (no
        run of one to note and flush)."""
        value = record.encode(produce.msg_id, produce.headers, produce.parts, now_us)
        seq = batch.add_message(value)
        self.topics.note_new_run(batch, facts.topic, facts.tag, [seq], len(value))
        accepted.append((produce.routing_id, produce.msg_id, seq, value))

    def _index(self, batch: Batch, facts: HeaderFacts, seq: int) -> None:
        """A stored message with an expiry or a priority in their indexes."""
        times, topic = facts.times, facts.topic
        if times.expires_us:
            self.expiry.track(batch, times.expires_us, seq)
        if times.priority and topic.priorities:
            self.lanes.add(batch, topic, times.priority, seq)

    def _read_headers(self, produce: frames.Produce, now_us: int,
                      rights: Rights) -> HeaderFacts:
        """The message's topic (made when new), tag, DEDUP-ID and KEY, and where a key
        of a partitioned topic belongs; a bad topic or DEDUP-ID is refused, and so is a
        topic the producer may not produce to (before it is made). Read once a take
        for each header group: a batch's members with the same headers share one
        tuple (pzq.protocol.produce_batches), and keys repeat."""
        headers = produce.headers
        facts = self._known.get(headers)
        if facts is not None:
            if not rights.produces_anywhere:
                self._check_allowed(produce, facts.topic.name, rights)
            return facts
        try:
            name, tag = (topic_and_tag(headers, self.topics.default_topic, self.topics.topics)
                         if headers else (self.topics.default_topic, b""))
            if len(tag) > TAG_MAX:  # (stored ones are read on: checked here only)
                raise ValueError(f"TAG of {len(tag)} bytes exceeds the limit of {TAG_MAX} "
                                 "bytes")
            dedup_id = dedup_id_of(headers) if headers else None
            times = message_times(headers, now_us) if headers else NO_TIMES
        except ValueError as exc:
            raise ProduceRefused(str(exc), produce.routing_id, produce.msg_id) from None
        if not rights.produces_anywhere:
            self._check_allowed(produce, name, rights)
        topic = self.topics.topics.get(name)  # (mostly known: made only when new)
        if topic is None:
            topic = self.topics.topic(name, now_us)
        key = key_of(headers) if headers else None
        # a key's owner holds for the take; a message without one is spread (each asks)
        moved = (self.routes.refusal(topic, key, self._mono)
                 if topic.partitions and key is not None else None)
        limited = self._room_limited or bool(topic.max_messages or topic.max_bytes)
        facts = self._known[headers] = _NEW_TUPLE(  # (HeaderFacts(...) without its call)
            HeaderFacts, (topic, tag, dedup_id, key, moved, times, limited,
                          # (no header: no DEDUP-ID and no times, no call to say so)
                          together(topic, dedup_id, times, limited, now_us) if headers
                          else not (topic.partitions or limited)))
        return facts

    def _check_allowed(self, produce: frames.Produce, topic: str, rights: Rights) -> None:
        if not rights.may_produce(topic):
            self.authorization.refused(PRODUCE, topic, rights.holder)
            raise ProduceRefused(produce_refusal(topic, rights), produce.routing_id,
                                 produce.msg_id)

    def _check_partition(self, produce: frames.Produce, facts: HeaderFacts) -> None:
        """A message of a partition another node owns is refused, naming the owner."""
        moved = facts.moved if facts.key is not None else self.routes.refusal(
            facts.topic, None, self._mono)
        if moved is not None:
            self.counters.moved += 1
            raise ProduceRefused(moved, produce.routing_id, produce.msg_id)

    def _repeated(self, produce: frames.Produce, topic: Topic, dedup_id: bytes,
                  seen_us: int, now_us: int) -> bool:
        """A repeat within the topic's window (its id seen at ``seen_us``) is not stored
        again; its ACK says DUPLICATE once the first is in the store (now, or with this
        batch)."""
        window_us = topic.dedup_window_us or self.limits.dedup_window_us
        if seen_us <= now_us - window_us:
            return False
        self.counters.duplicates += 1
        if self.dedup.in_batch(topic.id, dedup_id):
            self._repeats.append((produce.routing_id, produce.msg_id))
            self.idle = False
        else:
            self.acks.owe(produce.routing_id, produce.msg_id, True, frames.DUPLICATE)
        return True

    def written(self) -> None:
        for routing_id, msg_id in self._repeats:
            self.acks.owe(routing_id, msg_id, True, frames.DUPLICATE)
        self._repeats = []
        self.idle = True

    def take_scheduled(self) -> list[ScheduledStored]:
        """The batch is written: its scheduled messages, to ACK or to copy first."""
        scheduled, self.scheduled = self.scheduled, []
        self.counters.stored += len(scheduled)
        return scheduled

    def failed(self) -> None:
        for routing_id, msg_id in self._repeats + [(r, m) for r, m, _, _, _ in self.scheduled]:
            self.acks.owe(routing_id, msg_id, False, b"not stored: the store write failed")
        self._repeats = []
        self.scheduled = []
        self.idle = True

    def _check_room(self, batch: Batch, produce: frames.Produce, topic: Topic) -> None:
        """Refuse, never drop, once the queue is at --max-messages or --max-bytes, or
        the topic at its own limits."""
        limits = self.limits
        if not (limits.max_messages or limits.max_bytes or topic.max_messages
                or topic.max_bytes):
            return
        self._run.flush(batch)  # the topic's counts of this batch, with the run's
        full = ((limits.max_messages
                 and self.store.messages + batch.message_delta >= limits.max_messages)
                or (limits.max_bytes and self.store.bytes + batch.byte_delta >= limits.max_bytes)
                or not self.topics.room(topic, produce.body_size))
        if full:
            self.counters.queue_full += 1
            raise QueueFull(produce.routing_id, produce.msg_id)

    def _refuse(self, refused: ProduceRefused) -> None:
        self.counters.rejected += 1
        if over_a_limit(refused.reason):
            self.too_large.refused(refused.reason)
        log.debug("producer_message_rejected", reason=refused.reason,
                  msg_id=refused.msg_id[:frames.MSG_ID_MAX].hex())  # (a long one: refused)
        self.acks.owe(refused.routing_id, refused.msg_id, False, refused.reason.encode())
