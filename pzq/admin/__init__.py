"""What an operator asks of a node on the monitor socket.

- ``monitor``: the monitor endpoint and its table of verbs
- ``node_admin``: the dead letters and requeue
- ``topic_admin``: topics and groups
- ``group_ops``: a group's pending list and seek
"""
