"""The store: everything a node keeps on disk, in one LevelDB database.

The key layout (``keyspace``), the stored message (``record``), the Store with its
group-committed batches and the parts that follow them (``store``), the copies and
tombstones of other nodes' messages (``replicas``), the store's format version
(``store_format``) and its copy as of one moment (``snapshot_copy``, for backups).
No other package touches plyvel.
"""
