"""The archive tier: a ZPER segment log of every acked message, and its readers."""
