"""pzq-monitor's scheduled cell names the day when the next message is not due today
(UTC): a message delayed by a year showed ``1 next 12:10:04Z``, read as today's and
long past."""

from __future__ import annotations

from datetime import UTC, datetime

from pzq.cli.topics_table import _scheduled_cell

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
