"""The cluster: copies before the ACK, removes after it, and takeover when a node dies.

- ``core``: the rules, no socket: frames in, frames out, time passed in
  (``peer_frames``: a peer's frames handled; ``sends``: what it sends, typed)
- ``links``: the cluster's sockets; ``senders``: which peer sent on which connection
- ``part``: the cluster as a part of the node's loop
- ``settings``: what the cluster is given; ``figures``: its STATS figures
- ``peers``: liveness of the other nodes
- ``replication``: producer ACKs waiting for copies
- ``removes``, ``done``: removes and groups' dones, kept until confirmed
- ``held``: this node's messages that peers have out
- ``takeover``: delivering a down node's messages, every group of them
- ``placement``: which node owns each partition; ``routes``: the route table
- ``protocols``: the cluster protocol each peer speaks
- ``lone``: what the node asks of its cluster, and a node without one
"""
