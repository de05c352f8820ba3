"""The benchmark's figures as a table and a chart."""

from __future__ import annotations

from pathlib import Path

from pzq.bench.measure import (
    Figure,
)


def print_table(figures: list[Figure]) -> None:
    print(f"{'scenario':<44} {'target':<8} {'msg/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'RSS MB':>7} {'/ceil':>6} {'/orig':>6}")
    for figure in figures:
        print(f"{figure.scenario:<44} {figure.target:<8} {figure.rate:>10.0f} "
              f"{figure.p50_ms:>8.2f} {figure.p99_ms:>8.2f} {figure.rss_mb or 0:>7.0f} "
              f"{_or_blank(figure.ratio):>6} {_or_blank(figure.vs_original):>6}")
    for figure in figures:
        if "deliveries_per_message" in figure.extra:
            print(f"{figure.scenario}: {figure.extra['deliveries_per_message']} deliveries "
                  f"per message, {figure.extra['expired']} expired")


def _or_blank(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def matplotlib_installed() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw_chart(figures: list[Figure], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rated = [figure for figure in figures if figure.ratio is not None]
    chart, axes = plt.subplots(figsize=(10, 0.4 * len(rated) + 1.5))
    axes.barh([figure.scenario for figure in rated], [figure.ratio or 0.0 for figure in rated],
              color="#3465a4")
    axes.axvline(1.0, color="#888", linestyle="--")
    axes.invert_yaxis()
    axes.set_xlabel("pzq rate / ceiling rate (same run)")
    axes.set_title("pzq against a store-nothing pyzmq device")
    chart.tight_layout()
    chart.savefig(path, dpi=100)
    plt.close(chart)
