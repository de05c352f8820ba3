"""pzq-monitor's table of topics and groups: the cells of a topic's ``default`` row."""

from __future__ import annotations

from rich.console import Console

from pzq.cli.topics_table import COLUMNS, topics_table
from pzq.client.monitor import StatsAnswer


def rows(stats: dict[str, object]) -> list[dict[str, str]]:
    view = topics_table([StatsAnswer("ipc://n", stats)])
    assert view is not None
    console = Console(width=400, record=True, color_system=None)
    console.print(view)
    lines = [line for line in console.export_text().splitlines() if line.startswith("│")]
    return [dict(zip(COLUMNS, (cell.strip() for cell in line.split("│")[1:-1]), strict=True))
            for line in lines]  # (the column names' line is drawn with ┃)


def test_defaults_row_says_its_figures_are_not_per_topic_and_a_groups_row_has_them():
    """``default`` (--send-dsn) keeps its delivered, acked and the rest for the node,
    not per topic: its row says "–" there (blank cells read as zero or missing)."""
    group = {"backlog": 4, "inflight": 1, "ready": 2, "consumers": 3, "delivered": 7,
             "acked": 5, "rates": {"acked_60s": 0.5}}
    stats = {"node_id": "n1", "topics": {
        "orders": {"messages": 9, "default_group": True, "groups": {"billing": group}},
        "audit": {"messages": 1, "default_group": False, "groups": {}}}}
    shown = {(row["topic"], row["group"]): row for row in rows(stats)}
    default, billing = shown["orders", "default"], shown["orders", "billing"]
    for name in ("in flight", "ready", "consumers", "delivered", "acked", "oldest unacked",
                 "acked/s"):
        assert default[name] == "–", name
    assert (billing["delivered"], billing["acked"], billing["consumers"]) == ("7", "5", "3")
    audit = shown["audit", ""]  # default does not read it: nothing is missing there
    assert (audit["delivered"], audit["acked"]) == ("", "")
