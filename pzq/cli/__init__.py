"""The command-line tools: ``pzq-produce`` (``produce``), ``pzq-consume`` (``consume``),
``pzq-ctl`` (``ctl``), ``pzq-monitor`` (``monitor``), ``pzq-keygen`` (``keygen``) and
``pzq-bench`` (``bench``); the daemon is pzq.node.main, pzq-archive pzq.archive.tool,
pzq-exporter pzq.monitoring.exporter.

- ``common``: what every client tool shares: one-line errors, endpoints, CURVE
- ``input_lines``, ``line_output``: pzq-produce's input and pzq-consume's output
- ``waiting``, ``consumer_endpoints``, ``handshake_watch``: saying
  what a tool waits on, and what answers (or refuses) at an endpoint
- ``human``: figures rounded for people; ``topics_table``: pzq-monitor's table of
  topics and groups; ``routes_text``: the route table as lines
"""
