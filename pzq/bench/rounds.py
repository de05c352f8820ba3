"""A scenario measured in rounds: in each, the ceiling, pzq and (when given) the C++
original one after the other, fresh processes each. A round trip a message (window 1)
swings with the machine's state from one run to the next, the ceiling's too, so one
draw of each says little; over rounds each target's row gives its median, and pzq's
ratios are taken within each round (their median, with their range)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from pzq.bench.measure import Figure, Rates, ratio


@dataclass
class Rounds:
    scenario: str
    ceiling: list[Rates] = field(default_factory=list)
    pzq: list[Rates] = field(default_factory=list)
    original: list[Rates] = field(default_factory=list)  # empty: not measured

    def figures(self) -> list[Figure]:
        """The ceiling's row, the original's when measured, then pzq's with its ratios."""
        figures = [_medians(self.scenario, "ceiling", self.ceiling)]
        if self.original:
            figures.append(_medians(self.scenario, "original", self.original))
        ours = _medians(self.scenario, "pzq", self.pzq)
        ours.ratio, ours.ratio_range = _within(self.pzq, self.ceiling)
        if self.original:
            ours.vs_original, ours.vs_original_range = _within(self.pzq, self.original)
        figures.append(ours)
        return figures

    def ceiling_medians(self) -> Rates:
        figure = _medians(self.scenario, "ceiling", self.ceiling)
        return figure.rate, figure.p50_ms, figure.p99_ms


def _medians(scenario: str, target: str, rounds: list[Rates]) -> Figure:
    rates = [rate for rate, _, _ in rounds]
    return Figure(scenario, target, statistics.median(rates),
                  statistics.median(p50 for _, p50, _ in rounds),
                  statistics.median(p99 for _, _, p99 in rounds),
                  rounds=len(rounds), rate_range=[min(rates), max(rates)])


def _within(ours: list[Rates], theirs: list[Rates]) -> tuple[float | None, list[float] | None]:
    """pzq's rate over the other's, round by round: their median and range."""
    ratios = [r for r in (ratio(mine[0], other[0]) for mine, other in zip(ours, theirs,
                                                                           strict=True))
              if r is not None]
    if not ratios:
        return None, None
    return round(statistics.median(ratios), 3), [min(ratios), max(ratios)]
