"""The figures of the benchmark beside the peers over its repeats, and their table:
each system's median, and pzq's value over each peer's taken within each repeat
(the median of those ratios, with their range)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

PZQ = "pzq"


@dataclass(frozen=True)
class Kind:
    key: str  # as the workloads name it
    label: str
    unit: str


KINDS = [
    Kind("produce", "produce 100 B, window 100, ACK after write", "msg/s"),
    Kind("produce fsync", "produce, fsync before ACK", "msg/s"),
    Kind("drain 1", "drain, one group", "msg/s"),
    Kind("drain 3 slowest", "drain, 3 groups at once: the slowest", "msg/s"),
    Kind("e2e", "end to end", "msg/s"),
    Kind("e2e p50", "end to end latency p50", "ms"),
    Kind("e2e p99", "end to end latency p99", "ms"),
    Kind("redelivery killed", "redelivery after a killed consumer", "s"),
    Kind("redelivery hung", "redelivery after a hung consumer", "s"),
    Kind("cpu server produce", "CPU per message, server: produce", "µs"),
    Kind("cpu client produce", "CPU per message, client: produce", "µs"),
    Kind("cpu server drain", "CPU per message, server: drain one group", "µs"),
    Kind("cpu client drain", "CPU per message, client: drain one group", "µs"),
    Kind("cpu server e2e", "CPU per message, server: end to end", "µs"),
    Kind("cpu client e2e", "CPU per message, clients: end to end", "µs"),
]


@dataclass
class Row:
    kind: Kind
    values: dict[str, list[float]] = field(default_factory=dict)  # system -> repeats
    ratios: dict[str, list[float]] = field(default_factory=dict)  # peer -> repeats

    def summary(self) -> dict[str, object]:
        found: dict[str, object] = {"figure": self.kind.label, "unit": self.kind.unit}
        for name, values in self.values.items():
            found[name] = {"median": statistics.median(values), "repeats": values}
        for name, ratios in self.ratios.items():
            found[f"pzq/{name}"] = {"median": statistics.median(ratios), "repeats": ratios}
        return found


class Table:
    """Every figure of every system, repeat by repeat."""

    def __init__(self, systems: list[tuple[str, str]]) -> None:
        self.systems = systems  # (name, short) each, pzq first
        self.rows = {kind.key: Row(kind) for kind in KINDS}

    def add_repeat(self, figures: dict[str, dict[str, float]]) -> None:
        """One repeat's figures, system name -> figure key -> value."""
        for key, row in self.rows.items():
            for name, _ in self.systems:
                if key in figures.get(name, {}):
                    row.values.setdefault(name, []).append(figures[name][key])
            ours = figures.get(PZQ, {}).get(key)
            for name, short in self.systems[1:]:
                theirs = figures.get(name, {}).get(key)
                if ours is not None and theirs:
                    row.ratios.setdefault(short, []).append(ours / theirs)

    def summary(self) -> list[dict[str, object]]:
        return [row.summary() for row in self.rows.values()]

    def lines(self) -> list[str]:
        peers = [short for _, short in self.systems[1:]]
        heads = ["figure", "unit", *(name for name, _ in self.systems),
                 *(f"pzq/{short}" for short in peers)]
        cells = [heads]
        for row in self.rows.values():
            cells.append([row.kind.label, row.kind.unit,
                          *(_number(row.values.get(name)) for name, _ in self.systems),
                          *(_ratio(row.ratios.get(short)) for short in peers)])
        widths = [max(len(line[column]) for line in cells) for column in range(len(heads))]
        return ["  ".join(cell.ljust(width) if column < 2 else cell.rjust(width)
                          for column, (cell, width) in enumerate(zip(line, widths,
                                                                     strict=True))).rstrip()
                for line in cells]


def _number(values: list[float] | None) -> str:
    if not values:
        return "-"
    value = statistics.median(values)
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratio(ratios: list[float] | None) -> str:
    if not ratios:
        return "-"
    median = f"{statistics.median(ratios):.2f}"
    if len(ratios) == 1:
        return median
    return f"{median} ({min(ratios):.2f}-{max(ratios):.2f})"
