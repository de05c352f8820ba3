"""pzq-exporter: Prometheus metrics, a status page and its history, for pzq nodes.

- ``exporter``: the command and its life
- ``scrape``: every node's STATS at once, each within its timeout
- ``metrics``, ``topic_metrics``, ``endpoint_metrics``: metric families from STATS
  (``endpoint_metrics``: those the endpoints declare of their own)
- ``history``: the last minutes of every node, for a fresh status page
- ``server``: the HTTP side (``status.html`` is the page)
"""
