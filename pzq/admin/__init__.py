"""What an operator asks of a node on the monitor socket: the monitor endpoint
(``monitor``), the node's verbs (``node_admin``: the dead letters and requeue),
topics and groups (``topic_admin``) with a group's pending list and seek
(``group_ops``).
"""
