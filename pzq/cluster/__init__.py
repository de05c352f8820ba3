"""The cluster: copies before the ACK, removes after it, and takeover when a node dies.

``core`` holds the rules and no socket (frames in, frames out, time passed in), with
a peer's frames handled by ``peer_frames`` and what it sends typed in ``sends``;
``links`` moves those frames over ZeroMQ and ``part`` is the cluster in the node's
loop. Liveness (``peers``), producer ACKs waiting for copies (``replication``),
removes and dones kept until confirmed (``removes``, ``done``), own messages peers
have out (``held``), who sent on which connection (``senders``), the delivery of a
down node's messages (``takeover``), partitions' owners and the route table
(``placement``, ``routes``), its settings (``settings``) and STATS figures
(``figures``) each have a module; ``lone`` is the node without a cluster.
"""
