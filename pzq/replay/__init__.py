"""Replays: a named group receives a range of its topic's archive again (REPLAY GROUP).

A replay is a durable import into a store area only that group reads
(pzq.delivery.replay_area): a reader, rate-limited, walks the archive range and
writes its messages there with its position in the same batch, and the group's
delivery serves the area beside its live messages (``range``: the range asked for,
resolved to archive offsets; ``reader``: a chunk of it as store records; ``part``:
the replays of a node, their verbs and their part of the loop).
"""
