"""Python clients for pzq: a windowed Producer, consumers, and the monitor's questions.

    from pzq.client import Producer, Consumer, GroupConsumer, request_monitor, fetch_stats
    from pzq.client import RoutedProducer, RoutedGroupConsumer  # partitioned topics

Each client is a shell over its session (``sessions``: frames and time in, frames and
events out, no I/O): ``producer``, ``consumer`` (--send-dsn), ``group_consumer``,
``route_table``, ``routed_producer``, ``routed_consumer``; ``message`` is a delivery
with its answers, ``monitor`` the monitor's questions, ``common`` what they share
(connecting, deadlines), ``link_watch`` whether a consumer's node answers. A client
owns its socket and stays on the thread that made it.

The errors a caller catches are pzq.errors', exported here too: each a ``PzqError``
(``ClientClosed``, ``ConsumeRefused``, ``ConsumeUnanswered``, ``EndpointError``);
a wait that runs out is a ``TimeoutError`` (``ConsumeUnanswered`` is both).
"""

from pzq.client.consumer import Consumer
from pzq.client.group_consumer import GroupConsumer
from pzq.client.message import Message
from pzq.client.monitor import StatsAnswer, fetch_stats, monitor_figures, request_monitor
from pzq.client.producer import Producer
from pzq.client.route_table import RouteTable
from pzq.client.routed_consumer import RoutedGroupConsumer
from pzq.client.routed_producer import RoutedProducer
from pzq.errors import ClientClosed, ConsumeRefused, ConsumeUnanswered, EndpointError, PzqError
from pzq.protocol.frames import ProducerAck

__all__ = ["ClientClosed", "ConsumeRefused", "ConsumeUnanswered", "Consumer", "EndpointError",
           "GroupConsumer", "Message", "Producer", "ProducerAck", "PzqError", "RouteTable",
           "RoutedGroupConsumer", "RoutedProducer", "StatsAnswer", "fetch_stats",
           "monitor_figures", "request_monitor"]
