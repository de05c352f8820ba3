"""The node's parts (pzq.parts), opened in the order the loop asks them, each wired to
what it needs by name here, where the whole wiring can be read.

The node's own parts first: its upkeep (the store's timed fsync, backfill), what
each client key may do (read again on SIGHUP before the wake takes anything), the
cluster (peers' frames before the consumers'; a part that does nothing without a
cluster), the producers' intake (--receive-dsn), the scheduled messages' releases
(the node's own, then, with a cluster, a down node's copies; after the cluster's
frames, which may drop one a peer released), the archive (it learns the wake's
time before the ACKs append, and fsyncs before the ZPER parts say what is durable),
the replays of the archive (pzq.replay: their reaper tick before the groups settle
who holds what), ``default`` (--send-dsn; its reaper tick reaps the takeovers before any group reaps
its own), the named groups (--consume-dsn) and the node's figures. Then the plug-in
endpoints that are on (pzq.node.endpoints), the administration, and last the
monitor, which answers for all of them. A part that is off is not opened, and the
loop, the ticks, node_ready and the close ask only the list.
"""

from __future__ import annotations

from collections.abc import Callable

from pzq import __version__, sockets
from pzq.admin.monitor import Monitor
from pzq.admin.node_admin import Admin
from pzq.admin.part import Administration
from pzq.admin.topic_admin import TopicAdmin
from pzq.backup.job import NodeFacts
from pzq.backup.part import Backups
from pzq.clock import Now
from pzq.errors import BindError
from pzq.node.authorization_part import AuthorizationPart
from pzq.node.copy_release import CopyRelease
from pzq.node.endpoints import CLUSTER, CONSUME, MONITOR, PLUG_INS, RECEIVE, SEND
from pzq.node.expiry_sweep import ExpirySweep
from pzq.node.figures import NodeFigures
from pzq.node.intake import Intake
from pzq.node.intake_part import IntakePart
from pzq.node.outbox import ProducerAcks
from pzq.node.release import Releaser, ScheduledRelease
from pzq.node.state import NodeState
from pzq.node.upkeep import NodeUpkeep
from pzq.node.wiring import NodeWiring
from pzq.parts import Parts
from pzq.protocol.routing import CLUSTER_PROTOCOL
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.replay.part import Replays
from pzq.security import NodeSecurity
from pzq.serving.answers import GroupAnswers
from pzq.serving.connections import ConsumerCount
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.holding import GroupDelivery
from pzq.serving.named_groups import NamedGroups, NoConsumeEndpoint
from pzq.serving.send_endpoint import SendEndpoint
from pzq.zmqio import Context, Socket


def open_parts(node: NodeState, context: Context, security: NodeSecurity, now: Now) -> Parts:
    """Every part that is on, bound; or, when one cannot bind, close those that were
    and raise (BindError)."""
    parts = Parts()
    try:
        _open(parts, NodeWiring(context, security, node.config, node.archiving, node.hub, now,
                                node.authorization), node)
    except BaseException:
        parts.close()
        raise
    return parts


def _open(parts: Parts, wiring: NodeWiring, node: NodeState) -> None:
    endpoints = node.config.endpoints
    replays = Replays(node.store, node.topics, node.archiving.logs, node.config.delivery,
                      node.config.replay_rate, node.hub)
    answers = GroupAnswers(node.archiving, replays.removed_filter(node.cluster.removed),
                           replays.removed_all_filter(node.cluster.removed_all))
    parts.add(NodeUpkeep(node.store, node.topics))
    parts.add(AuthorizationPart(node.authorization, node.hub, node.keys))
    parts.add(node.cluster.open_part(wiring.context, wiring.security, node.delivery,
                                     wiring.now), CLUSTER.role)
    intake = open_intake(wiring, node, endpoints[RECEIVE.role], parts)
    parts.add(intake, RECEIVE.role)
    parts.add(ScheduledRelease(node.scheduled, releaser(node), node.released,
                               node.cluster.own_delivery_allowed))
    if node.config.cluster is not None:
        parts.add(CopyRelease(node.cluster.taken_copies, releaser(node)))
    parts.add(node.archiving.part())
    parts.add(replays)
    send = open_send(wiring, node, endpoints[SEND.role], answers)
    parts.add(send, SEND.role)
    consume: NamedGroups = NoConsumeEndpoint()
    if CONSUME.role in endpoints:
        consume = opened = open_consume(wiring, node, endpoints[CONSUME.role], answers,
                                        replays)
        parts.add(opened, CONSUME.role)
    parts.add(ExpirySweep(node.expiry, node.store, node.topics, node.delivery, consume))
    parts.add(NodeFigures(node, intake.acks, send.connections, consume))
    for plug_in in PLUG_INS:
        dsn = endpoints.get(plug_in.endpoint.role)
        if dsn is not None:
            parts.add(plug_in.open(wiring, dsn), plug_in.endpoint.role, plug_in.endpoint.stats)
    parts.add(open_backups(node))
    parts.add(Administration(
        Admin(node.store, node.delivery, node.requeued, node.copy_requeued),
        TopicAdmin(node.store, node.topics, consume, node.delivery, node.cluster, replays,
                   node.scheduled),
        node.routes))
    monitor = sockets.bind_monitor(wiring.context, endpoints[MONITOR.role], wiring.security)
    parts.add(Monitor(monitor, parts, node.counters, node.authorization), MONITOR.role)


def releaser(node: NodeState) -> Releaser:
    """Scheduled records made new own messages (the node's own, or copies of a node
    taken over)."""
    return Releaser(node.store, node.requeued, node.copy_requeued, node.expiry, node.lanes,
                    node.topics)


def open_backups(node: NodeState) -> Backups:
    """Always on: BACKUP on the monitor, the store and the archive (when on)."""
    archive = node.archiving.tier.archive if node.config.archive_dir else None
    facts = NodeFacts(node.node_id.decode(), __version__, node.store.format, CLUSTER_PROTOCOL)
    return Backups(node.store, archive, facts, Now.read)


def open_intake(wiring: NodeWiring, node: NodeState, dsn: str, parts: Parts) -> IntakePart:
    """The producers' endpoint; it paces itself by the other parts' backlog."""
    config = node.config
    socket = sockets.bind_receive(wiring.context, dsn, wiring.security, config.frame_limit)
    acks = ProducerAcks(socket, node.counters)
    intake = Intake(socket, config.intake, node.store, node.counters, acks, node.topics,
                    node.dedup, node.routes, node.scheduled, node.expiry, node.lanes,
                    node.authorization)
    part = IntakePart(socket, intake, acks, node.cluster, node.counters, parts,
                      config.replicas, config.hard_sync, node.hub)
    node.store.register(part, first=True)  # its ACKs before the others' bookkeeping
    return part


def open_send(wiring: NodeWiring, node: NodeState, dsn: str,
              answers: GroupAnswers) -> SendEndpoint:
    """``default``: own messages, and down nodes' this node took over."""
    config, cluster = node.config, node.cluster
    deliveries = GroupDelivery(DEFAULT_GROUP, node.delivery, lambda: cluster.takeovers.states,
                               node.latency)
    connections = ConsumerCount(dsn)
    socket = watched(connections, lambda: sockets.bind_send(wiring.context, dsn,
                                                            wiring.security, connections.watch))
    return SendEndpoint(socket, connections, deliveries, answers, node.window, node.counters,
                        config.batch_size, config.reaper_period_us, node.reap,
                        cluster.own_delivery_allowed)


def open_consume(wiring: NodeWiring, node: NodeState, dsn: str,
                 answers: GroupAnswers, replays: Replays) -> ConsumeEndpoint:
    config = node.config
    connections = ConsumerCount(dsn)
    socket = watched(connections, lambda: sockets.bind_consume(
        wiring.context, dsn, wiring.security, config.consume_heartbeat_ms, connections.watch))
    return ConsumeEndpoint(socket, connections, node.store, node.topics, answers, config.delivery,
                           config.consume_heartbeat_ms, config.consume_heartbeat_s,
                           config.batch_size, node.cluster, node.holds, node.hub,
                           node.expiry, node.lanes, node.authorization, replays)


def watched(connections: ConsumerCount, bind: Callable[[], Socket]) -> Socket:
    """The socket ``bind`` bound, its connections counted; the count's monitor closed
    if it could not bind."""
    try:
        return bind()
    except BindError:
        connections.close()
        raise
