"""The benchmark behind ``pzq-bench``: real nodes on loopback, driven by load generators
in their own processes, each figure measured against a store-nothing ceiling in the
same run.

- ``scenarios``: what is measured; ``measure``: one measurement; ``report``: the table
  and the chart
- ``load``: the load generators; ``ceiling``: the store-nothing device; ``nodes``: the
  nodes measured; ``original``: the C++ original as a target; ``ports``: free ports
- ``groups``: topics and consumer groups; ``shards``: ``pzq --shards N`` against one
  node; ``zper``: the archive as a ZPER broker
- ``peers``: pzq beside Redis Streams and NATS JetStream, with ``peer_system`` (what
  each system offers the run), ``peer_pzq``, ``peer_redis``, ``peer_nats``,
  ``peer_servers`` (their servers), ``peer_load`` (what the generators share),
  ``peer_workloads``, ``peer_redelivery`` and ``peer_table`` (the figures' table)
- ``options``: the command-line checks the benchmark scripts share
"""
