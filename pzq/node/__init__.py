"""The node: one thread, every socket, and the order of work in each wake.

``state`` is what a node keeps between wakes (no sockets); ``endpoints`` binds the
sockets; ``intake`` and ``outbox`` own the producers' flow, pzq.serving the
consumers', pzq.admin the operator's; ``device`` orders them in a wake and ``run``
is the life of a node from bind to stop. Time is read once per wake (pzq.clock)
and passed to every part.
"""
