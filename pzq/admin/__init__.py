"""What an operator asks of a node on the monitor socket: the monitor endpoint
(``monitor``), which answers the verbs the parts contribute: the administration's
(``part``): the dead letters and requeue (``node_admin``), topics and groups
(``topic_admin``, its commands' words in ``topic_words``, its walks in
``topic_walks``) with a group's pending list and seek (``group_ops``), the route table.
"""
