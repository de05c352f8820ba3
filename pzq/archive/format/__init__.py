"""The segment log's format, and reading it without a node.

- ``codec``: the frame (ZMTP/2.0's rule, as ZPER writes it): encoders and ``frame_at``
- ``walker``: the one record walker, records by their frames, column-wise
- ``records``: records as readers take them under the one rule for damaged records:
  whole records with their message, where records start, their frames
- ``entry``: an archived message and its metadata frame
- ``raw``: topics of raw ZPER records, and the marker that says so
- ``segments``: segment files, named by the offset they start at
- ``index``: a segment's offset index, so a read seeks instead of scanning
- ``windows``: a piece of a segment read alone, from index entry to index entry
- ``files``: a topic's records from its files (pzq-archive, Spark executors)
"""
