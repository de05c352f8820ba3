"""The cluster: copies before the ACK, removes after it, and takeover when a node dies.

``core`` holds the rules and no socket (frames in, frames out, time passed in);
``links`` moves those frames over ZeroMQ. Liveness (``peers``), producer ACKs
waiting for copies (``replication``), removes kept until confirmed (``removes``)
and the delivery of a down node's messages (``takeover``) each have a module.
"""
