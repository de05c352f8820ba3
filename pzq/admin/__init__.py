"""What an operator asks of a node on the monitor socket.

- ``monitor``: the monitor endpoint; it answers its own verbs and those the parts
  contribute
- ``part``: the administration's verbs, contributed to the monitor
- ``node_admin``: the dead letters and requeue
- ``topic_admin``: topics and groups (its commands' words in ``topic_words``, its
  walks over the store in ``topic_walks``)
- ``group_ops``: a group's pending list and seek
"""
