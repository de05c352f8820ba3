"""Python clients for pzq: a windowed Producer, a Consumer, and the monitor's questions.

    from pzq.client import Producer, Consumer, GroupConsumer, request_monitor, fetch_stats
    from pzq.client import RoutedProducer, RoutedGroupConsumer  # partitioned topics
"""

from pzq.client.consumer import Consumer, Message
from pzq.client.group_consumer import GroupConsumer
from pzq.client.monitor import StatsAnswer, fetch_stats, monitor_figures, request_monitor
from pzq.client.producer import Producer
from pzq.client.route_table import RouteTable
from pzq.client.routed_consumer import RoutedGroupConsumer
from pzq.client.routed_producer import RoutedProducer
from pzq.errors import ConsumeRefused
from pzq.protocol.frames import ProducerAck

__all__ = ["ConsumeRefused", "Consumer", "GroupConsumer", "Message", "Producer",
           "ProducerAck", "RouteTable", "RoutedGroupConsumer",
           "RoutedProducer", "StatsAnswer", "fetch_stats", "monitor_figures", "request_monitor"]
