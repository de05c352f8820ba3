"""The segment log's format, and reading it without a node."""
