"""The clients' sessions without I/O: each takes frames and time in and gives frames
and events out; no socket, no clock read.

A shell (the sync clients beside this package, an asyncio client on the same
sessions) owns the socket, reads the clock once where it wakes, sends the frames a
session returns, and waits at most until ``next_deadline(now)``. The rules of a
session (windows and produce batches, ACK correlation, joining a group and joining
again, protocol downgrade, confirmations, heartbeats, routes) live here once.

Time is monotonic seconds as a float (the shells' ``time.monotonic()``): the
clients need no wall clock, and a session never reads one.

- ``producer``: a producer's window, its produce batches and which ACK answers which
  message (``ProducerSession``); the header frames a message's options make
- ``delivered``: a delivered message's fields, shared by every shell's ``Message``
- ``consumer``: the ``--send-dsn`` consumer's frames (``ConsumerSession``)
- ``group``: a consumer of a group on ``--consume-dsn`` (``GroupSession``)
- ``routes``: the route table as data (``KnownRoutes``), filled by a shell that asks
- ``routed_producer``: which owner a partitioned topic's message goes to, and what
  goes again after a MOVED or a silent node (``RoutedProducerSession``)
- ``routed_group``: the nodes a routed group consumer joins, and their turns
  (``RoutedGroupSession``)
"""
