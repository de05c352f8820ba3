"""Serving groups to their consumers: ``default`` on --send-dsn (the original frames,
one pool of consumers) and the named groups on --consume-dsn (credits per consumer),
through one path: who holds which delivery (``holding``), one sender (``sending``),
what an answer does (``answers``), and each endpoint with its parts (``send_endpoint``,
``consume_endpoint`` with ``liveness``, ``verbs`` and ``subscribe``).
"""
