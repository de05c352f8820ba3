"""A node's life: bind, serve until asked to stop, hand back, close.

Stopping is ordered on purpose: stop taking producer messages and delivering,
give producers whose copies are pending a moment for the peers' confirmations
(then REPLICATION_FAILED), send every ACK owed, and only then close the sockets,
and remove the files of the ipc endpoints the node bound.
"""

from __future__ import annotations

import zmq

from pzq import sockets
from pzq.clock import Now
from pzq.logs import get_logger
from pzq.node import collector
from pzq.node.descriptors import DescriptorWatch
from pzq.node.device import Device
from pzq.node.endpoints import CLUSTER
from pzq.node.start_report import NO_REPORT, StartReport
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.parts import Figures
from pzq.security import NodeSecurity, NothingToStop, Stoppable
from pzq.zmqio import Context

log = get_logger("pzq.node")

STOP_FLUSH_SECONDS = 2.0  # at most this long for copies and ACKs at a stop


class StopRequest:
    """Set by a signal handler (it only sets this); the loop acts on it."""

    def __init__(self) -> None:
        self.requested = False


def run(node: NodeState, waker: Waker, stop: StopRequest, security: NodeSecurity,
        shared: Context | None = None, report: StartReport = NO_REPORT,
        owns_process: bool = False) -> None:
    """Serve until ``stop`` is requested. The node makes its own ZeroMQ context and
    terminates it at the end, unless given a ``shared`` one (a node inside a test
    process, its endpoints on ``inproc://`` there), which it leaves to its owner.
    ``report`` hears when the node is ready (a shard's supervisor). ``owns_process``:
    the process is the node's alone (not a test's): it sets the garbage collector
    (pzq.node.collector) and watches the descriptors (pzq.node.descriptors)."""
    context = Context() if shared is None else shared
    authenticator: Stoppable = NothingToStop()
    device = None
    files: list[sockets.SocketFile] = []
    descriptors = DescriptorWatch()
    try:
        node.archiving.open(Now.read().wall_us / 1e6)
        authenticator = security.start(context, node.authorization.admits_send)
        node.keys.attach(security, authenticator, has_peers=bool(node.config.nodes))
        device = Device(node, waker, context, security, Now.read())
        bound = device.bound()
        node.keys.serve_at(bound, CLUSTER.role)  # a removed key's connections cut there
        files = sockets.socket_files(bound.values())
        if owns_process:
            tuned = collector.tune()
            log.info("collector_tuned", thresholds=list(tuned.thresholds), frozen=tuned.frozen)
        log.info("node_ready", node_id=node.node_id.decode(), messages=node.store.messages,
                 **bound)
        if owns_process:
            descriptors.start()
        report.ready()
        left = serve(device, stop)
        log.info("node_stopping", **left, producer_acks_sent=node.counters.producer_acks_sent,
                 messages=node.store.messages, inflight=len(node.delivery.inflight))
    finally:
        descriptors.stop()
        if device is not None:
            device.close()
        authenticator.stop()
        if shared is None:
            context.term()
        sockets.remove_socket_files(files)
        node.archiving.close(Now.read().wall_us / 1e6)


def serve(device: Device, stop: StopRequest) -> Figures:
    """Wakes until ``stop`` is requested, then a few more for what is owed; returns what
    the parts could not hand back."""
    poller = zmq.Poller()
    poller.register(device.waker.fileno(), zmq.POLLIN)
    for polled in device.polled():
        poller.register(polled, zmq.POLLIN)
    device.start(Now.read())
    while not stop.requested:
        device.one_wake(poller)
    device.stopping = True
    give_up = Now.read().mono + STOP_FLUSH_SECONDS
    while device.owes() and Now.read().mono < give_up:
        device.one_wake(poller)
    return device.hand_back(STOP_FLUSH_SECONDS)

