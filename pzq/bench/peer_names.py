"""The names each system's workload uses, shared by its sync and asyncio clients."""

PZQ_TOPIC = "t0"
REDIS_STREAM = "s0"
REDIS_FIELD = b"b"  # the one field of a Redis Stream entry: the message's body
