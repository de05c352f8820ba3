"""structlog set-up: one event per line on stderr, as console text or JSON."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str, fmt: str) -> None:
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
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


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    # Lazy: modules take their logger at import, before configure() has run.
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger
