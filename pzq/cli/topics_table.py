"""pzq-monitor's table of topics and consumer groups: one row per topic and per group of
each node, and with several nodes a row per topic and group summed over the nodes that
hold it (a partitioned topic's messages are spread over their owners)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from pzq.cli import human
from pzq.client.monitor import StatsAnswer
from pzq.clock import utc_time

COLUMNS = ("node", "topic", "group", "stored / backlog", "scheduled", "in flight", "ready",
           "consumers", "delivered", "acked", "oldest unacked", "lag / oldest", "received/s",
           "acked/s")
# received/s on a topic's row, acked/s on a group's: per second over the last minute;
# lag / oldest: a group's lag_seconds, a topic's oldest_seconds
NOT_PER_TOPIC = "–"  # ``default`` reads every topic it holds at once: its figures (in
# flight, ready, consumers, delivered, acked, oldest unacked, acked/s) are kept for the
# node, not per topic: they are in the node table, labelled (--send-dsn)


def topics_table(answers: Sequence[StatsAnswer]) -> Table | None:
    """None when no node that answered has a topic."""
    view = Table(title="topics and groups")
    for name in COLUMNS:
        view.add_column(name, justify="left" if name in COLUMNS[:3] else "right")
    rows = 0
    for answer in answers:
        for topic, figures in sorted(((answer.stats or {}).get("topics") or {}).items()):
            node = answer.stats["node_id"] if answer.stats else ""
            default = figures.get("default_group")
            elsewhere = NOT_PER_TOPIC if default else ""
            view.add_row(node, _topic_cell(topic, figures), "default" if default else "",
                         human.count(figures["messages"]), _scheduled_cell(figures),
                         *[elsewhere] * 6, _age_cell(figures, "oldest_seconds"),
                         _per_second(figures, "received_60s"), elsewhere)
            for group, numbers in sorted(figures.get("groups", {}).items()):
                view.add_row(node, topic, group, *_group_cells(numbers))
            rows += 1
    _cluster_rows(view, answers)
    return view if rows else None


SUMMED = ("backlog", "inflight", "ready", "consumers", "delivered", "acked")


def _cluster_rows(view: Table, answers: Sequence[StatsAnswer]) -> None:
    """Each topic held by more than one of the nodes that answered: its figures summed
    (the oldest unacked: the oldest of any node)."""
    held: dict[str, list[dict[str, Any]]] = {}
    for answer in answers:
        for topic, figures in ((answer.stats or {}).get("topics") or {}).items():
            held.setdefault(topic, []).append(figures)
    for topic, on_nodes in sorted(held.items()):
        if len(on_nodes) < 2:
            continue
        nodes = f"all {len(on_nodes)}"
        view.add_row(nodes, topic, "", human.count(sum(f["messages"] for f in on_nodes)),
                     human.count(sum(f.get("scheduled", 0) for f in on_nodes)),
                     "", "", "", "", "", "",
                     _age_cell({"oldest_seconds": max(f.get("oldest_seconds", 0)
                                                      for f in on_nodes)}, "oldest_seconds"),
                     human.rate(_summed_rate(on_nodes, "received_60s")),
                     "")
        groups = sorted({group for figures in on_nodes for group in figures.get("groups", {})})
        for group in groups:
            numbers = [figures["groups"][group] for figures in on_nodes
                       if group in figures.get("groups", {})]
            total: dict[str, Any] = {key: sum(n.get(key, 0) for n in numbers) for key in SUMMED}
            total["oldest_unacked_seconds"] = max(n.get("oldest_unacked_seconds", 0)
                                                  for n in numbers)
            total["lag_seconds"] = max(n.get("lag_seconds", 0) for n in numbers)
            total["rates"] = {"acked_60s": _summed_rate(numbers, "acked_60s")}
            view.add_row(nodes, topic, group, *_group_cells(total))


def _summed_rate(figures: list[dict[str, Any]], name: str) -> float:
    return sum((f.get("rates") or {}).get(name) or 0.0 for f in figures)


def _topic_cell(topic: str, figures: dict[str, Any]) -> str:
    """A partitioned topic's name with the partitions this node owns: ``orders p0,3/8``."""
    if not figures.get("partitions"):
        return topic
    owned = ",".join(str(partition) for partition in figures.get("partitions_owned", []))
    return f"{topic} p{owned or '-'}/{figures['partitions']}"


def _scheduled_cell(figures: dict[str, Any], now: datetime | None = None) -> str:
    """Scheduled messages and when the next is due: ``12 next 09:00:00Z`` today (UTC),
    ``12 next 2026-12-24 09:00Z`` on another day (a time of day alone read as today's:
    a message due next year looked overdue)."""
    waiting = figures.get("scheduled", 0)
    if not waiting:
        return ""
    due = utc_time(figures.get("next_due_us", 0))
    today = (now or datetime.now(UTC)).date()
    when = due.strftime("%H:%M:%SZ" if due.date() == today else "%Y-%m-%d %H:%MZ")
    return f"{human.count(waiting)} next {when}"


def _group_cells(numbers: dict[str, Any]) -> list[str]:
    oldest = numbers.get("oldest_unacked_seconds", 0)
    return [human.count(numbers.get("backlog", 0)), "",
            *(human.count(numbers.get(key, 0)) for key in ("inflight", "ready", "consumers",
                                                           "delivered", "acked")),
            human.duration(oldest) if oldest else "", _age_cell(numbers, "lag_seconds"), "",
            _per_second(numbers, "acked_60s")]


def _age_cell(figures: dict[str, Any], name: str) -> str:
    seconds = figures.get(name, 0)
    return human.duration(seconds) if seconds else ""


def _per_second(figures: dict[str, Any], name: str) -> str:
    rate = (figures.get("rates") or {}).get(name)
    return "" if rate is None else human.rate(rate)
