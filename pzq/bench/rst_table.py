"""A table as reStructuredText (a ``list-table``, which takes any cell text), and the
numbers in it written as the docs write them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Table:
    heads: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""  # a sentence before the table, or nothing

    def add(self, *cells: str) -> None:
        if len(cells) != len(self.heads):
            raise ValueError(f"{len(cells)} cells for {len(self.heads)} columns: {cells}")
        self.rows.append(list(cells))

    def rst(self) -> str:
        lines = [f"{self.caption}", ""] if self.caption else []
        lines += [".. list-table::", "   :header-rows: 1", ""]
        for row in [self.heads, *self.rows]:
            for column, cell in enumerate(row):
                text = " ".join(cell.split())
                lines.append(f"   {'* -' if column == 0 else '  -'}{' ' + text if text else ''}")
        return "\n".join(lines) + "\n"


def number(value: float | None) -> str:
    """Counts and rates whole, with spaces between thousands; small figures with two
    decimals or three digits; nothing for no figure."""
    if value is None:
        return ""
    if isinstance(value, int) or abs(value) >= 100:  # a count, or a rate
        return f"{value:,.0f}".replace(",", " ")
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def spread(values: Sequence[float], form: str = "ratio") -> str:
    """The median and, over several values, their range: ``0.42 (0.34-0.46)``."""
    if not values:
        return ""
    shown = ratio if form == "ratio" else number
    median = shown(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({shown(min(values))}-{shown(max(values))})"
