"""pzq: a persistent store-and-forward device for ZeroMQ."""

__version__ = "0.1.0"
