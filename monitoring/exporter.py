"""``python -m monitoring.exporter``: the same as ``pzq-exporter`` (pzq.monitoring.exporter)."""

from pzq.monitoring.exporter import main, serve

__all__ = ["main", "serve"]

if __name__ == "__main__":
    raise SystemExit(main())
