"""pzq-exporter: Prometheus metrics (``metrics``, ``topic_metrics``, and the endpoints'
own in ``endpoint_metrics``), a status page and its history, for pzq nodes."""
