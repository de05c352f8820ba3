"""Operator tooling for pzq: the Prometheus exporter and status page, dashboards, alerts."""
