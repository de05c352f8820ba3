"""The node: one thread, every socket, and the order of work in each wake.

- ``options``: the option rows; ``config``: the options, one frozen object from CLI >
  config file > defaults, in one unit per kind; ``config_checks``: what they must agree on
- ``keys``: the node's CURVE keys, read and checked before anything binds
- ``main``: the ``pzq`` daemon: options, start-up, signals, exit codes
- ``run``: a node's life from bind to stop
- ``state``: what a node keeps between wakes (no sockets)
- ``registry``: its parts (pzq.parts), opened from the options and wired; the
  endpoints declared once in ``endpoints``, plug-ins given ``wiring``
- ``device``: the order of one wake
- ``intake_part`` with ``intake``, ``outbox``, ``batch_acks``: the producers'
  endpoint: messages into the wake's batch, and the ACKs owed (a produce batch's once
  all are answered)
- ``upkeep``: the node's own timed work, as a part
- ``scheduler``: the parts' periodic wake-ups, APScheduler interval jobs run in the
  loop's thread (no thread of their own; the poll's timeout waits for them);
  ``waker``: a pipe through which signal handlers wake the loop
- ``figures``, ``topic_figures``, ``topic_rates``: MONITOR and STATS, from counters
- ``shards``, ``shard_layout``, ``shard_process``, ``start_report``: ``pzq --shards N``:
  the supervisor, where each shard lives, how it starts, how it says it started

The consumers' flow is pzq.serving, the operator's pzq.admin. Time is read once per
wake (pzq.clock) and passed to every part.
"""
