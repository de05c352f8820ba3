"""The node's archive: the topic logs it appends to, and its parts of the loop.

- ``archive``: ``Archive``, one topic log per topic under one directory
- ``topiclog``: one topic's log: appends, fsyncs, rolls, retention, reads
- ``segment_reads``: the reads a FETCH makes of a topic's segments, damaged records alone
- ``lock``: one node per archive directory
- ``tier``: acked and given-up messages in, fsync'd before the store's deletes
- ``archiving``: the node's archive as the store's batches see it (pzq.archive.contract)
- ``part``: its part of the loop: the timed fsync and retention
"""
