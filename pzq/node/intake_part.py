"""The producers' endpoint (--receive-dsn) as a part of the loop, like every other.

It takes what producers sent into the wake's batch (pzq.node.intake); once the batch
is written its producers are ACKed, or its messages copied to the peers first (their
ACKs come back on the node's hub as ``CopiesSettled``); a batch that failed is
refused to its producers. Without copies the ACKs go out the moment the batch is
written (this part is the store's first participant); with copies, after the cluster's
frames; and again at the next wake when a full pipe refused them; while many wait it
stops reading producers.
At a stop it gives the peers a moment for the copies' confirmations, then ACKs what
waits (REPLICATION_FAILED) before the node closes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from operator import itemgetter
from typing import Protocol

import zmq

from pzq.agenda import Agenda
from pzq.clock import Now
from pzq.cluster.lone import Cluster
from pzq.cluster.replication import CopiesSettled
from pzq.counters import Counters
from pzq.events import EventHub
from pzq.hooks import nothing
from pzq.logs import get_logger
from pzq.node.intake import Intake
from pzq.node.intake_model import NOTHING_ACCEPTED, Accepted
from pzq.node.outbox import LIMIT as ACKS_LIMIT
from pzq.node.outbox import RETRY_MS, ProducerAcks
from pzq.parts import Figures, Part
from pzq.store.batch import Batch, Participant
from pzq.store.record import ScheduledStored, Stored
from pzq.zmqio import POLLIN, Events, PollEntry, Socket

log = get_logger("pzq.intake")
ROUTING_ID = itemgetter(0)  # of a stored message (pzq.store.record.Stored)
MSG_ID = itemgetter(1)
PACED_INTAKE = 16  # messages sent alone a wake takes at least while consumers are behind
MOST_AHEAD = 128  # messages stored and not yet ACKed past which a wake takes no more
FAR_AHEAD = 2 * MOST_AHEAD  # ... past which a paced take waits for consumers' next ACKs
HOLD_S = 0.002  # (at most this long)


class Backlog(Protocol):
    def backlogged(self) -> bool: ...  # consumers connected, stored messages waiting

    def acked(self) -> int: ...  # messages consumers ACKed so far, node-wide


class IntakePart(Part, Participant):
    def __init__(self, socket: Socket, intake: Intake, acks: ProducerAcks, cluster: Cluster,
                 counters: Counters, backlog: Backlog, replicas: int, hard_sync: bool,
                 hub: EventHub) -> None:
        self._wait_changed: Callable[[], None] = nothing  # until joined
        self.socket = socket
        self.intake = intake
        self.acks = acks
        self.cluster = cluster
        self.counters = counters
        self.backlog = backlog  # the node's parts: whether consumers wait behind stored ones
        self.replicas = replicas
        self.hard_sync = hard_sync
        # While consumers are connected and stored messages wait for them, a wake takes
        # messages sent alone and produce batches (each whole) until those stored and
        # not yet ACKed by a consumer (of --send-dsn or of any named group) would pass
        # MOST_AHEAD, and PACED_INTAKE at least (the batch that passes it is taken
        # whole; one batch a wake paid the wake's cost every 25 messages of the usual
        # batch while the node was behind); then it delivers. The one thread shares
        # its time between the two, and intake does not run far ahead of what consumers
        # take, whichever they are: a message waits behind a short backlog, not behind
        # all that producers sent ahead (end-to-end latency). While consumers keep up a
        # wake takes many, and its own cost is shared by them; a fixed 16 paid that cost
        # every 16 messages, a fixed 64 let a named group fed by producers of single
        # messages fall behind (docs/performance.rst "The pace of the intake follows the
        # consumers' ACKs"). Only a wake that came to PACED_INTAKE messages (or a batch)
        # asks, not every wake of a single message. And while consumers are FAR_AHEAD
        # behind and draining it, a wake's paced take holds the producers until their next
        # ACKs (HOLD_S at most): a take of one produce batch a wake let the intake
        # match each of a consumer's reads of 100, so the backlog a consumer's stall
        # left never drained while producers kept up (docs/performance.rst, "The end
        # to end after a consumer's stall"). Consumers that ACK nothing (hung, gone
        # quiet), or fewer than the intake stored since the last ask (slower than its
        # floor: the backlog grows anyway), hold no producer: the floor a wake.
        # Under --hard-sync a wake's fsync is shared by as many messages as came: no
        # pace.
        self._pace = 0 if hard_sync else PACED_INTAKE
        self._stored = self._acked = 0  # messages stored, and ACKed: at the last ask
        self._ahead = 0  # stored messages the ACKs since have not matched
        self._taking = False  # producers are read this wake
        # While held: the consumers' ACK count the intake waits to see move (-1: not
        # held), and until when at most (monotonic seconds)
        self._held_at = -1
        self._held_until = 0.0
        self._poll_entry = PollEntry(socket)
        self._accepted: Accepted = NOTHING_ACCEPTED  # stored in the batch being written
        self._mono = 0.0
        self._failing = False  # the store refuses writes (logged once per spell)
        # (Participant) True while the batch being built holds nothing of the producers'
        # (a wake that read none of them): the write has nothing to ACK, and asks
        # nothing of this part
        self.idle = True
        hub.subscribe(CopiesSettled, self._settled)

    def _settled(self, settled: CopiesSettled) -> None:
        self.acks.replicated(settled.acks)

    # -- the loop's questions ------------------------------------------------------

    def bound(self) -> list[Socket]:
        return [self.socket]

    def interest(self, poller: zmq.Poller, now: Now, delivering: bool) -> None:
        """Producers are read while there is room for their ACKs and the node runs, and
        not while held: until the consumers ACK more, or the hold's time is up."""
        taking = delivering and self.acks.answers < ACKS_LIMIT  # (not full)
        if taking and self._held_at >= 0:
            if self.backlog.acked() != self._held_at or now.mono >= self._held_until:
                self._held_at = -1
            else:
                taking = False
        self._taking = taking
        self._poll_entry.poll_for(poller, POLLIN if taking else 0)

    tells_wait = True  # told after a send that left ACKs (pzq.agenda)

    def join(self, agenda: Agenda) -> None:
        self._wait_changed = partial(agenda.changed, self)

    def timeout_ms(self, now: Now) -> int | None:
        if self.acks.answers:
            return RETRY_MS  # ACKs a full pipe refused, again
        if self._held_at >= 0:  # the hold's end
            return max(1, math.ceil((self._held_until - now.mono) * 1000))
        return None

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        self._mono = now.mono
        if self._taking and events.get(self.socket, 0) & POLLIN:
            self.idle = False
            self._accepted = self.intake.take(batch, now, self._pace, self._paced)
        else:  # (a wake between two takes: the next looks behind its first message)
            self.intake.look = True

    def _paced(self) -> int:
        """How many messages sent alone this wake takes in all, asked once it came to
        PACED_INTAKE: 0 (no pace) when no consumer is behind; else what keeps the
        messages stored and not yet ACKed by a consumer within MOST_AHEAD, and at least
        PACED_INTAKE. FAR_AHEAD or more, when consumers ACKed since the last ask at
        least as many as were stored, the producers are held after this take until
        they ACK again (HOLD_S at most)."""
        if not self.backlog.backlogged():
            return 0
        stored, acked = self.counters.stored, self.backlog.acked()
        # (at least 0: a message ACKed by several groups is no credit for the next)
        self._ahead = max(0, self._ahead + stored - self._stored - acked + self._acked)
        # (draining: consumers ACKed since, at least as many as were stored since)
        draining = acked != self._acked and acked - self._acked >= stored - self._stored
        self._stored, self._acked = stored, acked
        if self._ahead >= FAR_AHEAD and draining:
            self._held_at, self._held_until = acked, self._mono + HOLD_S
            self._wait_changed()
        return max(PACED_INTAKE, MOST_AHEAD - self._ahead)

    def written(self) -> None:
        """The batch holding the messages is written: ACK their producers, or copy them
        to the peers first."""
        if self._failing:
            if self.intake.store.write_failing_since is not None:
                # A batch with nothing in it was not written: no sign the store takes
                # writes again (its ACKs, none, need no answer). Asked again after
                # the next batch (still not idle), until one is written.
                return
            self._failing = False
            log.warning("store_write_recovered")
        accepted, self._accepted = self._accepted, NOTHING_ACCEPTED
        alone = accepted.alone
        stored = len(alone) + accepted.in_runs  # (len(accepted), without its call)
        self.counters.stored += stored
        if self.replicas and stored:
            self.cluster.replicate(accepted.every(), self._mono)
        elif stored == 1 and alone and not self.intake.scheduled:
            # (a message sent alone in its wake: no lists for it, its ACK sent at once
            # with any that waited, in one call)
            routing_id, msg_id, _, _ = alone[0]
            self.acks.send_one_ok(routing_id, msg_id)
            self.idle = True
            return
        elif stored:
            self._ack_stored(accepted)
        if self.intake.scheduled:
            scheduled = self.intake.take_scheduled()
            if self.replicas:  # copied as any message, with their due times
                self.cluster.replicate_scheduled(scheduled, self._mono)
            else:
                self._owe_ok_to(scheduled)
        if not self.replicas:
            # Sent now, before the other participants' bookkeeping and the other
            # parts' sends: a producer waiting for its ACK waits for nothing else of
            # the wake (``send_out`` sends again those a full pipe refused).
            self.acks.flush()
        self.idle = True

    def _ack_stored(self, accepted: Accepted) -> None:
        """ACK the producers of what the batch stored (no copies to wait for): those
        sent alone together, each run of a produce batch at once."""
        if accepted.alone:
            self._owe_ok_to(accepted.alone)
        for open_batch, run, seqs, _ in accepted.runs:
            self.acks.owe_run(open_batch, run.first, len(seqs))

    def _owe_ok_to(self, stored: Sequence[Stored | ScheduledStored]) -> None:
        """An ACK "1" owed to the producer of each stored message, made at once."""
        self.acks.owe_ok(list(map(ROUTING_ID, stored)), list(map(MSG_ID, stored)))

    def write_failed(self, reason: str) -> None:
        self.idle = False  # the next write says the store recovered
        if not self._failing:  # once per failing spell, not once per wake
            self._failing = True
            log.error("store_write_failed", error=reason, refused=len(self._accepted))
        accepted, self._accepted = self._accepted, NOTHING_ACCEPTED
        self.counters.store_failures += len(accepted)
        status = f"not stored: {reason}".encode()
        for routing_id, msg_id, _, _ in accepted.every():
            self.acks.owe(routing_id, msg_id, False, status)
        self.acks.flush()

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        # (mostly none waits: ``written`` sent them; ``answers`` is how many do)
        if self.acks.answers and self.acks.flush():  # a full pipe refused some: sent
            self._wait_changed()  # again after a while

    # -- stopping ------------------------------------------------------------------

    def owes(self) -> bool:
        """Producer ACKs wait for copies (a stopping node waits a little for them)."""
        return self.cluster.next_deadline() is not None

    def hand_back(self, seconds: float) -> Figures:
        self.acks.replicated(self.cluster.fail_all())
        self.acks.flush_before_exit(seconds)
        return {"unsent_producer_acks": len(self.acks)}

    def close(self) -> None:
        self.socket.close()
