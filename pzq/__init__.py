"""pzq: a persistent store-and-forward device for ZeroMQ.

Its packages, from the bottom up: ``protocol``, ``store``, ``delivery``, ``cluster``
and ``archive``, ``serving``, ``admin``, ``node``, ``client``, ``cli``, ``monitoring``
(``bench`` and ``spark`` beside them). What every part shares sits here:

- ``errors``: one error tree, each error with its exit code
- ``clock``: the time a wake reads once; ``durations``: time options' units
- ``parts``: what a part of the node's loop offers it
- ``zmqio``: socket types and multipart calls; ``sockets``: binding, the IPv6 rule
- ``security``, ``zap``, ``handshakes``: CURVE, ZAP, refusals ZAP never sees
- ``reach``: whether a process answers at an endpoint; ``curve_probe``: which key a
  node refuses in a client's handshake
- ``logs``, ``counters``, ``rates``: log lines, figures, rates and ACK latencies
- ``fsync``: names that survive a power cut
- ``tool_base``: the tools' argument parser, closed pipes, Ctrl-C
"""

__version__ = "0.1.0"
