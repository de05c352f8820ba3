"""ZPER's endpoints on a node, each a part of the loop beside the work it does.

- ``writer``: ZPWriter (--zper-writer-dsn): ZPER producers write raw records
- ``ack``: ZPAck (--zper-ack-dsn): what each flush made durable, published
- ``relay``: ZPRelay (--zper-relay-dsn): every new record pushed to its clients
- ``reader_server``: ZPER's reader protocol (--archive-dsn): OFFSET and FETCH
"""
