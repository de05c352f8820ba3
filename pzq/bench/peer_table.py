"""The figures of the benchmark beside the peers over its repeats, and their table:
each system's median, and pzq's value over each peer's taken within each repeat
(the median of those ratios, with their range). The asyncio rows are each system's
asyncio client; their last column is pzq's asyncio client over its sync one, taken
within each repeat."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

PZQ = "pzq"


@dataclass(frozen=True)
class Kind:
    key: str  # as the workloads name it
    label: str
    unit: str
    sync_key: str | None = None  # an asyncio client's row: the sync client's row


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
    Kind("cpu server drain 3", "CPU per delivery, server: drain, 3 groups at once", "µs"),
    Kind("cpu client drain 3", "CPU per delivery, clients: drain, 3 groups at once", "µs"),
    Kind("cpu server e2e", "CPU per message, server: end to end", "µs"),
    Kind("cpu client e2e", "CPU per message, clients: end to end", "µs"),
    Kind("aio produce", "asyncio: produce", "msg/s", "produce"),
    Kind("aio drain 1", "asyncio: drain, one group", "msg/s", "drain 1"),
    Kind("aio e2e", "asyncio: end to end", "msg/s", "e2e"),
    Kind("aio e2e p50", "asyncio: end to end latency p50", "ms", "e2e p50"),
    Kind("aio e2e p99", "asyncio: end to end latency p99", "ms", "e2e p99"),
    Kind("aio cpu client produce", "asyncio: CPU per message, client: produce", "µs",
         "cpu client produce"),
    Kind("aio cpu client drain", "asyncio: CPU per message, client: drain one group", "µs",
         "cpu client drain"),
    Kind("aio cpu client e2e", "asyncio: CPU per message, clients: end to end", "µs",
         "cpu client e2e"),
]
OVER_SYNC = "pzq asyncio/sync"


@dataclass
class Row:
    kind: Kind
    values: dict[str, list[float]] = field(default_factory=dict)  # system -> repeats
    ratios: dict[str, list[float]] = field(default_factory=dict)  # peer -> repeats
    over_sync: list[float] = field(default_factory=list)  # pzq asyncio / sync, repeats

    def summary(self) -> dict[str, object]:
        found: dict[str, object] = {"figure": self.kind.label, "unit": self.kind.unit}
        for name, values in self.values.items():
            found[name] = {"median": statistics.median(values), "repeats": values}
        for name, ratios in self.ratios.items():
            found[f"pzq/{name}"] = {"median": statistics.median(ratios), "repeats": ratios}
        if self.over_sync:
            found[OVER_SYNC] = {"median": statistics.median(self.over_sync),
                                "repeats": self.over_sync}
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
            sync = figures.get(PZQ, {}).get(row.kind.sync_key or "")
            if ours is not None and sync:
                row.over_sync.append(ours / sync)

    def summary(self) -> list[dict[str, object]]:
        return [row.summary() for row in self.rows.values()]

    def lines(self) -> list[str]:
        peers = [short for _, short in self.systems[1:]]
        over_sync = any(row.over_sync for row in self.rows.values())
        heads = ["figure", "unit", *(name for name, _ in self.systems),
                 *(f"pzq/{short}" for short in peers), *([OVER_SYNC] if over_sync else [])]
        cells = [heads]
        for row in self.rows.values():
            cells.append([row.kind.label, row.kind.unit,
                          *(_number(row.values.get(name)) for name, _ in self.systems),
                          *(_ratio(row.ratios.get(short)) for short in peers),
                          *([_ratio(row.over_sync) if row.over_sync else ""]
                            if over_sync else [])])
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
