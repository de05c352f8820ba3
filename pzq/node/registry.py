"""The node's parts (pzq.parts), one opener a part, in the order the loop asks them.

An opener reads the options and returns its part with its sockets bound, or None
when the part is off; it may use the parts opened before it. A new endpoint is a
module with its part, an option in pzq.node.config and a line in ``OPENERS``.

The order is the loop's: the cluster first (peers' frames before the consumers'); the
archive before the groups (it learns the wake's time before their ACKs append) and
before the ZPER parts (its fsync before the writer says what is durable); ``default``
(--send-dsn) before the named groups (its reaper tick reaps the takeovers before any
group reaps its own); the ZPER writer before its ack publisher. The monitor, which
answers for all of them, is the device's and comes last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import zmq

from pzq import sockets
from pzq.archive.archiving import Archiving
from pzq.archive.part import ArchivePart, ArchiveReaders
from pzq.archive.zper_ack import ACK_SNDHWM, ZperAck, ZperAckPart
from pzq.archive.zper_relay import ZperRelay, ZperRelayPart
from pzq.archive.zper_writer import NoWrites, ZperWriter, ZperWriterPart
from pzq.clock import Now
from pzq.cluster.core import ClusterCore
from pzq.cluster.links import ClusterLinks
from pzq.cluster.part import ClusterPart, Replicated
from pzq.node.config import Config
from pzq.node.state import NodeState
from pzq.parts import Part
from pzq.security import NodeSecurity
from pzq.serving.answers import GroupAnswers
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.holding import GroupDelivery
from pzq.serving.send_endpoint import SendEndpoint
from pzq.store.topics import DEFAULT_GROUP
from pzq.zmqio import Context, Socket

WRITER_RCVHWM = 100_000  # ZPER writes queued before the loop takes them

PartT = TypeVar("PartT", bound=Part)


@dataclass(frozen=True)
class Wiring:
    """What an opener may use: the context to bind in, the node's keys and state, the
    groups' one path for answers, and where producer ACKs that waited for copies go."""

    context: Context
    security: NodeSecurity
    node: NodeState
    answers: GroupAnswers
    replicated: Replicated
    now: Now

    @property
    def config(self) -> Config:
        return self.node.config

    def bind(self, kind: int, dsn: str, flag: str,
             options: dict[int, int] | None = None) -> Socket:
        return sockets.bind(self.context, kind, dsn, flag, self.security, options=options)


Opener = Callable[[Wiring, list[Part]], Part | None]


def first(parts: list[Part], kind: type[PartT]) -> PartT | None:
    """The part of this kind among those opened, if it is on."""
    return next((part for part in parts if isinstance(part, kind)), None)


def the(parts: list[Part], kind: type[PartT]) -> PartT:
    """The part of this kind, which is always on (--send-dsn's)."""
    found = first(parts, kind)
    if found is None:
        raise LookupError(f"no {kind.__name__} among the parts")
    return found


def open_cluster(wiring: Wiring, opened: list[Part]) -> Part | None:
    cluster = wiring.node.cluster
    if not isinstance(cluster, ClusterCore):  # a lone node has no links
        return None
    links = ClusterLinks(cluster, wiring.context, wiring.security, wiring.now.mono)
    return ClusterPart(links, wiring.node.delivery, wiring.replicated)


def open_archive(wiring: Wiring, opened: list[Part]) -> Part | None:
    archiving = wiring.node.archiving
    return ArchivePart(archiving) if isinstance(archiving, Archiving) else None


def open_archive_readers(wiring: Wiring, opened: list[Part]) -> Part | None:
    archiving, dsn = wiring.node.archiving, wiring.config.archive_dsn
    if dsn is None or not isinstance(archiving, Archiving):
        return None
    return ArchiveReaders(archiving.tier, wiring.bind(zmq.ROUTER, dsn, "--archive-dsn"))


def open_send(wiring: Wiring, opened: list[Part]) -> Part | None:
    """``default``: own messages, and down nodes' this node took over."""
    node, config = wiring.node, wiring.config
    cluster = node.cluster
    deliveries = GroupDelivery(DEFAULT_GROUP, node.delivery, lambda: cluster.takeovers.states,
                               node.latency)
    socket = sockets.bind_send(wiring.context, config.send_dsn, wiring.security)
    return SendEndpoint(socket, deliveries, wiring.answers, node.window, node.counters,
                        config.batch_size, config.reaper_frequency, node.reap,
                        cluster.own_delivery_allowed)


def open_consume(wiring: Wiring, opened: list[Part]) -> Part | None:
    node, config = wiring.node, wiring.config
    if config.consume_dsn is None:
        return None
    socket = sockets.bind_consume(wiring.context, config.consume_dsn, wiring.security,
                                  config.consume_heartbeat // 1000)
    consume = ConsumeEndpoint(socket, node.store, node.topics, wiring.answers,
                              config.delivery, config.consume_heartbeat, config.batch_size,
                              node.cluster, node.holds, node.hub)
    return consume


def open_zper_writer(wiring: Wiring, opened: list[Part]) -> Part | None:
    archiving, config = wiring.node.archiving, wiring.config
    if config.zper_writer_dsn is None or not isinstance(archiving, Archiving):
        return None
    writer = ZperWriter(archiving.tier.archive, config.archive_topic,
                        keep_all=config.zper_ack_dsn is not None)  # acks for mode 0 too
    socket = wiring.bind(zmq.ROUTER, config.zper_writer_dsn, "--zper-writer-dsn",
                         {zmq.RCVHWM: WRITER_RCVHWM})
    return ZperWriterPart(writer, socket, config.batch_size)


def open_zper_ack(wiring: Wiring, opened: list[Part]) -> Part | None:
    config = wiring.config
    if config.zper_ack_dsn is None or not isinstance(wiring.node.archiving, Archiving):
        return None
    socket = wiring.bind(zmq.XPUB, config.zper_ack_dsn, "--zper-ack-dsn",
                         {zmq.SNDHWM: ACK_SNDHWM})
    return ZperAckPart(ZperAck(socket), first(opened, ZperWriterPart) or NoWrites(),
                       config.batch_size)


def open_zper_relay(wiring: Wiring, opened: list[Part]) -> Part | None:
    archiving, config = wiring.node.archiving, wiring.config
    if config.zper_relay_dsn is None or not isinstance(archiving, Archiving):
        return None
    socket = wiring.bind(zmq.ROUTER, config.zper_relay_dsn, "--zper-relay-dsn")
    return ZperRelayPart(ZperRelay(archiving.tier.archive, socket, wiring.now.mono),
                         config.relay_poll * 1000, config.batch_size)


OPENERS: tuple[Opener, ...] = (
    open_cluster,
    open_archive,
    open_archive_readers,
    open_send,
    open_consume,
    open_zper_writer,
    open_zper_ack,
    open_zper_relay,
)


def open_parts(wiring: Wiring) -> list[Part]:
    """Every part that is on, bound; or, when one cannot bind, close those that were
    and raise (BindError)."""
    opened: list[Part] = []
    try:
        for opener in OPENERS:
            part = opener(wiring, opened)
            if part is not None:
                opened.append(part)
    except BaseException:
        close_parts(opened)
        raise
    return opened


def close_parts(parts: list[Part]) -> None:
    for part in parts:
        part.close()
