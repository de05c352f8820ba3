"""The node: one thread, every socket, and the order of work in each wake.

``state`` is what a node keeps between wakes (no sockets); ``registry`` opens its
parts (pzq.parts) and wires them, the endpoints declared in ``endpoints`` (plug-ins
given ``wiring``); ``intake_part`` (with ``intake``, ``outbox``, ``batch_acks``) is
the producers' endpoint, pzq.serving the consumers', pzq.admin the operator's;
``upkeep`` and ``figures`` (``topic_figures``, ``topic_rates``) are the node's own
parts; ``device`` orders a wake and ``run`` is the life of a node from bind to stop
(``scheduler`` and ``waker`` wake it). The options: ``options`` (rows),
``config`` (the frozen Config, in one unit per kind), ``config_checks``, CURVE keys
``keys``; ``main`` is the daemon, ``shards``, ``shard_layout``, ``shard_process``
and ``start_report`` its supervisor of ``--shards``. Time is read once per wake
(pzq.clock) and passed to every part.
"""
