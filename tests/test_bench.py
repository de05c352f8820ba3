"""The benchmark runs end to end (a few hundred messages); it asserts no speed."""

from __future__ import annotations

import json

import pytest

from pzq.cli import bench


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_benchmark_smoke_run_reports_every_section(tmp_path, capsys):
    assert bench.main(["--smoke", "--json", str(tmp_path / "b.json"),
                       "--png", str(tmp_path / "b.png")]) == 0
    figures = json.loads((tmp_path / "b.json").read_text())
    scenarios = {figure["scenario"] for figure in figures}
    for expected in ("produce 100 B window 1", "produce 100 B window 100", "drain 100 B",
                     "end to end 100 B window 100", "end to end, --hard-sync",
                     "end to end, archive on", "produce 100 B window 100, --replicas 1",
                     "backlog 0: produce", "backlog 500: drain", "slow consumer (3 ms a message)"):
        assert expected in scenarios
    slow = next(f for f in figures if f["scenario"].startswith("slow consumer"))
    assert slow["extra"]["deliveries_per_message"] >= 1.0
    assert all(figure["rate"] > 0 for figure in figures)
    assert all(figure["ratio"] > 0 for figure in figures
               if figure["target"] == "pzq" and not figure["scenario"].startswith("slow"))
    assert any(figure["rss_mb"] > 0 for figure in figures)
    assert (tmp_path / "b.png").stat().st_size > 5_000
    assert "ratio" in capsys.readouterr().out
