"""pzq-exporter: Prometheus metrics, a status page and its history, for pzq nodes."""
