"""Serving groups to their consumers: ``default`` on --send-dsn (the original frames,
one pool of consumers) and the named groups on --consume-dsn (credits per consumer),
through one path: who holds which delivery (``holding``), one sender (``sending``,
``batching``), what an answer does (``answers``), and each endpoint with its parts
(``send_endpoint`` with ``connections``; ``consume_endpoint`` with ``liveness``,
``verbs`` and ``subscribe``; the named groups as others see them, ``named_groups``).
"""
