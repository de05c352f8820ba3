"""The benchmark's figures as a table and a chart."""

from __future__ import annotations

from pathlib import Path

from pzq.bench.measure import (
    Figure,
)


def print_table(figures: list[Figure]) -> None:
    """One line a figure; a row measured in rounds gives its medians, its rate's and
    ratios' ranges over the rounds in brackets."""
    print(f"{'scenario':<44} {'target':<8} {'msg/s':>17} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'RSS MB':>7} {'/ceil':>16} {'/orig':>16}")
    for figure in figures:
        print(f"{figure.scenario:<44} {figure.target:<8} "
              f"{_ranged(figure.rate, figure.rate_range, '.0f'):>17} "
              f"{_measured(figure.p50_ms, '.2f'):>8} {_measured(figure.p99_ms, '.2f'):>8} "
              f"{_measured(figure.rss_mb, '.0f'):>7} "
              f"{_ranged(figure.ratio, figure.ratio_range, '.2f'):>16} "
              f"{_ranged(figure.vs_original, figure.vs_original_range, '.2f'):>16}")
    for figure in figures:
        if "deliveries_per_message" in figure.extra:
            print(f"{figure.scenario}: {figure.extra['deliveries_per_message']} deliveries "
                  f"per message, {figure.extra['expired']} expired")


def _ranged(value: float | None, low_high: list[float] | None, form: str) -> str:
    """A median and, where the rounds differed, their range: ``0.87 (0.80-0.95)``."""
    if value is None:
        return ""
    if not low_high or low_high[0] == low_high[1]:
        return format(value, form)
    return f"{value:{form}} ({low_high[0]:{form}}-{low_high[1]:{form}})"


def _measured(value: float | None, form: str) -> str:
    """A latency or RSS cell: empty where the scenario measured none (its 0)."""
    return format(value, form) if value else ""


def matplotlib_installed() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw_chart(figures: list[Figure], path: Path) -> None:
    """pzq's rate over the ceiling's for every scenario, and over the original's
    beside it when the run measured the original."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rated = [figure for figure in figures if figure.ratio is not None]
    versus = any(figure.vs_original is not None for figure in rated)
    chart, axes = plt.subplots(figsize=(10, (0.55 if versus else 0.4) * len(rated) + 1.5))
    rows = range(len(rated))
    height = 0.4 if versus else 0.8
    axes.barh([row - (height / 2 if versus else 0) for row in rows],
              [figure.ratio or 0.0 for figure in rated], height=height, color="#3465a4",
              label="pzq / ceiling (a pyzmq device that stores nothing)")
    if versus:
        axes.barh([row + height / 2 for row in rows],
                  [figure.vs_original or 0.0 for figure in rated], height=height,
                  color="#f57900", label="pzq / the C++ original (blank: not measured)")
        axes.set_xscale("log")  # from a fraction to twenty times
        ticks = [0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50]
        axes.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
        axes.legend(loc="lower right", fontsize="small")
    axes.set_yticks(list(rows), [figure.scenario for figure in rated])
    axes.axvline(1.0, color="#888", linestyle="--")
    axes.invert_yaxis()
    axes.set_xlabel("pzq rate / the other's rate, measured in the same run")
    axes.set_title("pzq against a store-nothing pyzmq device"
                   + (" and the C++ original" if versus else ""))
    chart.tight_layout()
    chart.savefig(path, dpi=100)
    plt.close(chart)
