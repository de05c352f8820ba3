"""ZPER's endpoints on a node: the writer, the ack publisher, the relay, the reader server."""
