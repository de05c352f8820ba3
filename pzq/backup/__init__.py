"""Backups of a running node and their restore check.

A backup (``job``) copies the store as of one moment (pzq.store.snapshot_copy) and
the archive up to its durable end (pzq.archive.tier.durable) into a directory, a step per
wake of the loop (``part``: the monitor's BACKUP), each file with its checksum
(``files``), and writes the manifest last (``manifest``); a node started on the copy
checks it against the manifest before it opens anything.
"""
