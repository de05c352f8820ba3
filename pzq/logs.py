"""structlog set-up: one event per line on stderr, as console text or JSON."""

from __future__ import annotations

import logging
import os
import sys

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

# Set by the supervisor of --shards for each shard: its number goes on every line the
# shard logs, since the shards share the supervisor's stderr
SHARD_ENV = "PZQ_SHARD"


def configure(level: str, fmt: str) -> None:
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=False))
    shard = os.environ.get(SHARD_ENV, "")
    named: list[Processor] = [_ShardField(int(shard))] if shard.isdigit() else []
    structlog.configure(
        processors=[
            *named,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelName(level.upper())),
        # each line and its newline in one write: the shards of --shards share one
        # stderr, and with PYTHONUNBUFFERED print's two writes interleave between them
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


class _ShardField:
    """``shard``: which shard logged the line (two shards' lines alike otherwise)."""

    def __init__(self, number: int) -> None:
        self.number = number

    def __call__(self, logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
        event.setdefault("shard", self.number)
        return event


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    # Lazy: modules take their logger at import, before configure() has run.
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger
