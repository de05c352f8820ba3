"""The store: everything a node keeps on disk, in one LevelDB database.

- ``keyspace``: the key layout, in one place
- ``record``: the stored message
- ``store``: the Store: opening, group-committed writes, reads, recovery after a failed write
- ``leveldb``: LevelDB as the store opens it: options, fsyncs, errors as text, the format
- ``batch``: one wake's changes (``Batch``) and the parts that follow them (``Participant``)
- ``log_sync``, ``log_files``, ``log_syncer``: when LevelDB's log reaches the disk, fsyncing
  it, and the thread that does so beside the loop
- ``replicas``: copies and tombstones of other nodes' messages
- ``topic_model``: what a topic and a group are, and who holds a message
- ``topic_registry``: the registries of topics and groups
- ``topics``: one stored copy of each message and who is done with it (``Topics``)
- ``topic_log``: a topic's log of its messages' tags, and its backfill
- ``log_blocks``: the topics' logs in blocks of seqs by tag, on disk and in memory
- ``topic_counts``: the figures and registry entries a batch changes
- ``group_marks``: what a group is done with before the others
- ``dedup``: producers' de-duplication ids
- ``directory``: a ``--database`` folder that holds other files is refused
- ``repair``: LevelDB's repair of a damaged store
- ``store_format``: the store's format version, checked at the start
- ``snapshot_copy``: the store's copy as of one moment, for backups

No other package touches plyvel.
"""
