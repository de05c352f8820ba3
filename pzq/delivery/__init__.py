"""Delivery: which stored message goes to a consumer next, and what happens after.

- ``state``: a DeliveryState walks one store area through stored, in flight, acked
  or ready again (``settings``: what it is given; ``owed``: what it owes the store);
  its sides: ``tracking`` (its tables, the reaper and the ways back without an ACK),
  ``delivering`` (the delivery pass) and ``acking`` (a consumer's answers)
- ``areas``: the areas (this node's messages, or a down node's it took over)
- ``groups``, ``default_area``: the areas consumer groups read (``recent``: what one
  group read, kept for the topic's other groups by the read); ``replay_area``: archived
  messages read back for one group
- ``entries``, ``inflight``, ``redelivery``: ordered tables for the in-flight LRU and
  the redelivery queue
- ``delayed``: deliveries that wait out a backoff or a delayed NACK
- ``held``: whether another node has a message out
- ``framing``: --send-dsn's frames
- ``first_runs``: runs of first deliveries handed over and tracked in one go
- ``lanes``: messages with a priority, served first
- ``expiry``: whether a message expired, and what becomes of it
- ``ages``: how old a group's oldest message is, for its lag in seconds
- ``window``: how many deliveries may be unacked at once

No sockets here; time comes in.
"""
