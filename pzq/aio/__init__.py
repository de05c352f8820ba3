"""asyncio clients for pzq, on ``zmq.asyncio``: one event loop, no threads.

    from pzq.aio import Producer, GroupConsumer, Consumer, request_monitor, fetch_stats
    from pzq.aio import RoutedProducer, RoutedGroupConsumer  # partitioned topics
    from pzq.aio import ArchiveReader

Each client is a shell over the same session as its sync twin in pzq.client
(``pzq.client.sessions``: frames and time in, frames and events out, no I/O), so
windows, produce batches, joining a group again, protocol downgrade and routes
behave alike. A client belongs to the event loop it is first used on.

- ``producer``: ``Producer`` (``publish`` returns a Future its ACK resolves)
- ``group_consumer``: ``GroupConsumer`` (--consume-dsn)
- ``consumer``: ``Consumer`` (--send-dsn, the original frames)
- ``message``: a delivery with its awaited answers
- ``routed_producer``, ``routed_consumer``, ``route_table``: partitioned topics
- ``monitor``: ``request_monitor``, ``fetch_stats``; ``archive_reader``: ``ArchiveReader``
- ``socket_io``: whole messages in and out without blocking, safe to cancel;
  ``probe``: why an endpoint is silent, told without blocking

The errors are pzq.client's (pzq.errors'), exported here too, and ``ReaderError``
(an archive reader's refusal); a wait that runs out is a ``TimeoutError``.
"""

from pzq.aio.archive_reader import ArchiveReader
from pzq.aio.consumer import Consumer
from pzq.aio.group_consumer import GroupConsumer
from pzq.aio.message import Message
from pzq.aio.monitor import fetch_stats, monitor_figures, request_monitor
from pzq.aio.producer import Producer
from pzq.aio.route_table import RouteTable
from pzq.aio.routed_consumer import RoutedGroupConsumer
from pzq.aio.routed_producer import RoutedProducer
from pzq.client.monitor import StatsAnswer
from pzq.errors import (
                        ClientClosed,
                        ConsumeRefused,
                        ConsumeUnanswered,
                        EndpointError,
                        PzqError,
                        ReaderError,
)
from pzq.protocol.frames import ProducerAck

__all__ = ["ArchiveReader", "ClientClosed", "ConsumeRefused", "ConsumeUnanswered", "Consumer",
           "EndpointError", "GroupConsumer", "Message", "Producer", "ProducerAck", "PzqError",
           "ReaderError", "RouteTable", "RoutedGroupConsumer", "RoutedProducer", "StatsAnswer",
           "fetch_stats", "monitor_figures", "request_monitor"]
