"""Every socket a node binds, opened together and closed together."""

from __future__ import annotations

from dataclasses import dataclass, field

import zmq

from pzq import sockets
from pzq.cluster.core import ClusterCore
from pzq.cluster.links import ClusterLinks
from pzq.cluster.lone import Cluster
from pzq.node.config import Config
from pzq.node.zper import ZperSockets, open_zper_sockets
from pzq.security import NodeCurve
from pzq.serving.connections import ConsumerCount
from pzq.zmqio import Context, QuietSocket, Socket


@dataclass
class Endpoints:
    receive: Socket  # ROUTER: producers
    send: Socket  # DEALER: consumers
    monitor: Socket  # ROUTER: MONITOR, STATS, admin
    consumers: ConsumerCount  # connections to ``send``
    readers: Socket | None  # ROUTER: ZPER readers of the archive
    cluster: ClusterLinks | None
    zper: ZperSockets | None = None  # the ZPER writer, ack and relay
    consume: Socket | None = None  # ROUTER: consumer groups
    consume_events: Socket | None = None  # its disconnections
    quiet_monitor: QuietSocket = field(init=False)

    def __post_init__(self) -> None:
        self.quiet_monitor = QuietSocket(self.monitor)

    def addresses(self) -> dict[str, str]:
        """The endpoints actually bound (wildcard ports resolved), for node_ready."""
        bound = {"receive": self.receive, "send": self.send, "monitor": self.monitor}
        if self.readers is not None:
            bound["archive"] = self.readers
        if self.cluster is not None:
            bound["cluster"] = self.cluster.router
        if self.consume is not None:
            bound["consume"] = self.consume
        bound.update(self.zper.bound() if self.zper is not None else {})
        return {name: sockets.bound_endpoint(socket) for name, socket in bound.items()}

    def pollable(self) -> list[Socket | int]:
        """What is always polled for input (the rest as each part says: pzq.parts); the
        seldom busy monitor by its descriptor."""
        always: list[Socket | int] = [self.quiet_monitor.fd]
        if self.readers is not None:
            always.append(self.readers)
        always += self.zper.pollable() if self.zper is not None else []
        return always + (self.cluster.sockets() if self.cluster else [])

    def close(self) -> None:
        self.consumers.close()
        if self.consume_events is not None:
            self.consume_events.close()
        for socket in (self.receive, self.send, self.monitor, self.readers, self.consume):
            if socket is not None:
                socket.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.zper is not None:
            self.zper.close()


def open_endpoints(context: Context, config: Config, curve: NodeCurve | None,
                   cluster: Cluster, mono: float) -> Endpoints:
    """Bind everything, or close what was bound and raise BindError."""
    opened: list[Socket] = []
    keys = curve.keys if curve is not None else None
    try:
        receive = _keep(opened, sockets.bind_receive(context, config.receive_dsn, keys))
        send = _keep(opened, sockets.bind_send(context, config.send_dsn, keys))
        monitor = _keep(opened, sockets.bind_monitor(context, config.monitor_dsn, keys))
        readers = (_keep(opened, sockets.bind(context, zmq.ROUTER, config.archive_dsn,
                                              "--archive-dsn", keys))
                   if config.archive_dsn is not None else None)
        zper = open_zper_sockets(context, config, keys, opened)
        consume = (_keep(opened, sockets.bind_consume(context, config.consume_dsn, keys,
                                                      config.consume_heartbeat // 1000))
                   if config.consume_dsn is not None else None)
        links = (ClusterLinks(cluster, context, curve, mono)
                 if isinstance(cluster, ClusterCore) else None)  # a lone node has no links
    except BaseException:
        for socket in opened:
            socket.close(0)
        raise
    events = (consume.get_monitor_socket(zmq.EVENT_DISCONNECTED) if consume is not None
              else None)
    return Endpoints(receive, send, monitor, ConsumerCount(send), readers, links, zper,
                     consume, events)


def _keep(opened: list[Socket], socket: Socket) -> Socket:
    opened.append(socket)
    return socket
