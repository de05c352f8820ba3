"""What an operator asks of one named group: its pending deliveries, and a seek.

``pending`` lists what the group has out (delivered, not yet ACKed) and what it gave
back to be delivered again, as Redis's XPENDING does: each message's key, the
consumer holding it, how long since it was sent, its delivery count and the time
left to its ack deadline.

``seek`` moves the group (as XGROUP SETID, or a JetStream consumer's start): every
stored message of its topic below the target is done for the group (delivered no
more; deleted once no other group holds it) and every one at or past it is to be
delivered, those it had ACKed included while another group keeps them stored. A seek
back before the group's start moves the start too. Deliveries out below the target
are forgotten (a late ACK for one is an unknown ACK).
"""

from __future__ import annotations

from dataclasses import dataclass

from pzq.delivery.inflight import InFlight
from pzq.protocol.message_keys import message_key
from pzq.serving.holding import GroupDelivery
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import Group, Topics

PENDING_LIST = 100  # lines PENDING GROUP answers unless limit= says otherwise


@dataclass
class Pending:
    """The first ``limit`` lines, and how many deliveries are out and waiting in all."""

    lines: list[str]
    out: int
    waiting: int


def pending(deliveries: GroupDelivery, now_us: int, limit: int) -> Pending:
    """One line per delivery out or waiting to go again, oldest message first, at most
    ``limit``; the counts are of every one (the head line said those listed alone)."""
    found = Pending([], 0, 0)
    for state in (deliveries.state, *deliveries.taken_over().values()):
        origin = state.area.node_id
        out = [(entry, "out") for entry in state.inflight.entries()]
        waiting = [(entry, "waiting") for entry in (*state.ready.entries(),
                                                    *state.delayed.entries())]
        found.out, found.waiting = found.out + len(out), found.waiting + len(waiting)
        rows = out + waiting
        for entry, where in sorted(rows, key=lambda row: row[0].seq):
            if len(found.lines) < limit:
                found.lines.append(_line(deliveries, origin, entry, where, now_us))
    return found


def _line(deliveries: GroupDelivery, origin: bytes, entry: InFlight, where: str,
          now_us: int) -> str:
    owner = deliveries.holder_of(deliveries.key_of(origin, entry.seq)) if where == "out" \
        else None
    consumer = owner.routing_id.hex() if owner is not None else "-"
    deadline = (f" deadline_in_ms={max(0, entry.deadline_us - now_us) // 1000}"
                if where == "out" else "")
    return (f"{message_key(origin, entry.seq).decode()} {where} "
            f"consumer={consumer} idle_ms={max(0, now_us - entry.sent_us) // 1000} "
            f"deliveries={entry.deliveries}{deadline}")


@dataclass
class Moved:
    """What a seek changed: own messages now done (deleted, or marked while other
    groups hold them), and those to be delivered (again, or newly held by a start
    moved back)."""

    deleted: list[int]
    marked: list[int]
    to_deliver: list[int]
    backlog: int = 0  # the messages it holds from the target on, after the seek


def seek(store: Store, topics: Topics, batch: Batch, group: Group, target: int) -> Moved:
    """Move ``group`` to ``target`` (a seq) in ``batch``; see the module's words."""
    held_from = group.start_seq
    if target < held_from:
        topics.move_start(group, target)
    topic, moved = group.topic, Moved([], [], [])
    for seq, tag in topics.walk(topic):
        if not group.holds(seq, tag):
            continue
        if seq >= target:
            moved.backlog += 1
        done = topics.is_done(group.id, seq)
        if seq < target and not done:
            value = store.get_own(seq)
            if value is not None:
                gone = topics.done(batch, seq, topic, tag, len(value), group.id)
                if gone or seq < group.delivered_below:  # (else a priority message's
                    # count may be all that says it went out: see GroupArea._forget_count)
                    batch.delete(keyspace.group_count_key(group.id, seq))
                (moved.deleted if gone else moved.marked).append(seq)
        elif seq >= target and done:
            topics.not_done(batch, group, seq)
            moved.to_deliver.append(seq)
        elif target <= seq < held_from:
            moved.to_deliver.append(seq)
    topics.counts.lower_floor(group, target)
    return moved


def let_go_below(deliveries: GroupDelivery, target: int) -> None:
    """After a seek: deliveries out or waiting below ``target`` are done with, and the
    group reads again from its floor."""
    state = deliveries.state
    origin = state.area.node_id
    for entry in [*state.inflight.entries(), *state.ready.entries(),
                  *state.delayed.entries()]:
        if entry.seq < target:
            state.forget(entry.seq)
            deliveries.release(deliveries.key_of(origin, entry.seq))
    state.rewind()
