"""A damaged record as readers report it: topic, segment and offset, in one line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from pzq.errors import DamagedRecordError
from pzq.logs import get_logger


@dataclass(frozen=True)
class DamagedRecord:
    topic: str
    segment: str  # the segment file's name, e.g. 00000000000000060148.dat
    offset: int  # where the damaged record starts in the topic's log
    size: int  # bytes skipped, up to the next whole record
    first_bad: int  # the offset of the first byte found wrong
    reason: str

    def describe(self) -> str:
        return (f"damaged record in topic {self.topic}, segment {self.segment}, offset "
                f"{self.offset}: {self.reason} (first bad byte at offset {self.first_bad}); "
                f"{self.size} bytes up to offset {self.offset + self.size}")

    def error(self) -> DamagedRecordError:
        return DamagedRecordError(self.describe(), self.topic, self.segment, self.offset)


DamageHandler = Callable[[DamagedRecord], None]


def log_damage(record: DamagedRecord) -> None:
    """The default report: one warning event per damaged record."""
    logger().warning("archive_record_damaged", topic=record.topic, segment=record.segment,
                     offset=record.offset, bytes=record.size, first_bad=record.first_bad,
                     reason=record.reason)


def raise_damage(record: DamagedRecord) -> None:
    raise record.error()


def logger() -> structlog.typing.FilteringBoundLogger:
    """pzq's logger where structlog is set up (the node), else one line on stderr:
    a library user's stdout (or a Spark worker's) is theirs."""
    if structlog.is_configured():
        return get_logger("pzq.archive")
    wrapped: structlog.typing.FilteringBoundLogger = structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(0), component="pzq.archive")
    return wrapped
