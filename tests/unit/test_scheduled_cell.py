"""pzq-monitor's scheduled cell names the day when the next message is not due today
(UTC): a message delayed by a year showed ``1 next 12:10:04Z``, read as today's and
long past."""

from __future__ import annotations

from datetime import UTC, datetime

from pzq.backup.job import iso
from pzq.cli.topics_table import _scheduled_cell
from pzq.protocol.time_headers import MAX_TIME_US

NOW = datetime(2026, 11, 30, 12, 24, tzinfo=UTC)


def due(moment: datetime) -> dict[str, int]:
    return {"scheduled": 3, "next_due_us": int(moment.timestamp() * 1_000_000)}


def test_today_is_a_time_of_day_and_another_day_has_its_date():
    assert _scheduled_cell(due(datetime(2026, 11, 30, 23, 59, 1, tzinfo=UTC)), NOW) == \
        "3 next 23:59:01Z"
    assert _scheduled_cell(due(datetime(2127, 2, 14, 12, 10, 4, tzinfo=UTC)), NOW) == \
        "3 next 2127-02-14 12:10Z"
    assert _scheduled_cell(due(datetime(2026, 12, 1, 0, 0, 5, tzinfo=UTC)), NOW) == \
        "3 next 2026-12-01 00:00Z"
    assert _scheduled_cell({"scheduled": 0}, NOW) == ""


def test_the_last_microsecond_of_9999_is_shown_as_it_is():
    """The latest NOT-BEFORE the node takes: a float of its seconds rounded it to the
    year 10000, which datetime refuses (ValueError)."""
    assert _scheduled_cell({"scheduled": 1, "next_due_us": MAX_TIME_US}, NOW) == \
        "1 next 9999-12-31 23:59Z"


def test_the_backup_times_are_exact_to_the_microsecond():
    assert iso(MAX_TIME_US) == "9999-12-31T23:59:59.999999Z"
    assert iso(1) == "1970-01-01T00:00:00.000001Z"
