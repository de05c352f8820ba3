"""The archive tier: a ZPER segment log of every acked message, and its readers.

- ``format``: the segment log as bytes and files: frames, records and the one record
  walker, metadata, raw ZPER records, segment names, offset indexes, and reading
  them without a node (pzq-archive, Spark)
- ``tier``: the node's archive: the topic logs it appends to, fsyncs, reads for ZPER
  readers and cuts by retention, its lock, and its part of the loop
- ``zper``: ZPER's endpoints on a node: the writer, the ack publisher, the relay and
  the reader server
- ``contract``: what the rest of the node asks of the archive (``ArchiveWrites``) and
  the archive of a node without one (``NoArchiving``)
- ``reader``: ``ArchiveReader``, a Python client of a node's ZPER reader socket
- ``damage``: a damaged record as every reader reports it
- ``tool``: ``pzq-archive``, a look into an archive directory without a node
"""
