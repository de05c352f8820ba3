"""Frame layouts, as pure encode and decode functions that raise one DecodeError.

``frames``: producers, consumers and the monitor (the original pzq's protocol);
``cluster``: the traffic between nodes; ``zper``: ZPER's reader requests and replies.
"""
