"""Frame layouts, as pure encode and decode functions that raise one DecodeError.

- ``frames``: producers, consumers and the monitor (the original pzq's protocol)
- ``produce_batches``: produce protocol 2, many messages in one multipart message
- ``consume``: the consume endpoint (--consume-dsn) of consumer groups
- ``headers``: the producer headers pzq reads itself (TOPIC, TAG, DEDUP-ID, KEY),
  and the partition a key belongs to
- ``message_keys``: the node's message key and the numbers inside it
- ``monitor_text``: the MONITOR answer's text
- ``cluster``: the traffic between nodes
- ``topic_reads``: what reads a node's topics, as it tells its copies' holders, and
  the name of the group ``default``
- ``frame_groups``: a group of frames as pzq stores and carries them
- ``routing``: where clients reach a node, as it tells its peers
- ``zper``: ZPER's identities, reader requests and replies, writer and acks
"""
