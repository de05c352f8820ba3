"""The store: everything a node keeps on disk, in one LevelDB database.

The key layout (``keyspace``), the stored message (``record``), the Store with its
group-committed batches and the parts that follow them (``store``), and the copies
and tombstones of other nodes' messages (``replicas``), the store's format version
(``store_format``). No other package touches plyvel.
"""
