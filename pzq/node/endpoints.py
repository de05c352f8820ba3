"""Every endpoint of the node, declared once (pzq.endpoints): the option rows, their
checks, each shard's endpoints, node_ready's names, the STATS sections and the
exporter's metrics all follow from these.

The node's own endpoints are opened by pzq.node.registry, which wires their parts to
each other. The others are plug-ins: each module declares its endpoint with its
opener, and a new endpoint is that module and one line in ``PLUG_INS``, in the loop's
order (the ZPER readers, then the writer before its ack publisher).
"""

from __future__ import annotations

from pzq.archive.zper.ack import ZPER_ACK
from pzq.archive.zper.reader_server import ARCHIVE_READERS
from pzq.archive.zper.relay import ZPER_RELAY
from pzq.archive.zper.writer import ZPER_WRITER
from pzq.endpoints import SHARD_CLUSTER, Endpoint, PlugIn
from pzq.node.wiring import NodeWiring

RECEIVE = Endpoint("receive", "receive_dsn", "endpoint producers connect to",
                   default="tcp://*:11131")
SEND = Endpoint("send", "send_dsn", "endpoint consumers connect to", default="tcp://*:11132")
MONITOR = Endpoint("monitor", "monitor_dsn", "endpoint answering MONITOR, STATS and PING",
                   default="ipc:///tmp/pzq-monitor")
CONSUME = Endpoint("consume", "consume_dsn", "endpoint of consumer groups: topics, groups, "
                   "credits (off when unset)")
CLUSTER = Endpoint("cluster", "broadcast_dsn", "this node's own cluster endpoint",
                   shard=SHARD_CLUSTER)

PLUG_INS: tuple[PlugIn[NodeWiring], ...] = (
    ARCHIVE_READERS,
    ZPER_WRITER,
    ZPER_ACK,
    ZPER_RELAY,
)

ENDPOINTS: tuple[Endpoint, ...] = (RECEIVE, SEND, MONITOR, CONSUME, CLUSTER,
                                   *(plug_in.endpoint for plug_in in PLUG_INS))
