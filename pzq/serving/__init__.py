"""Serving groups to their consumers: ``default`` on --send-dsn (the original frames,
one pool of consumers) and the named groups on --consume-dsn (credits per consumer),
through one path.

- ``holding``: a group's consumers and who holds which delivery
- ``sending``: the one sender (round robin over credit); ``batching``: protocol 2's BATCH
- ``answers``: what an ACK, a NACK, a dead letter and an expiry do
- ``send_endpoint``: --send-dsn; ``connections``: how many consumers it has
- ``consume_endpoint``: --consume-dsn, with ``liveness`` (consumers still there),
  ``verbs`` (the consumer verbs' table) and ``subscribe`` (the group a CONSUME names)
- ``named_groups``: the named groups as the other parts see them
"""
