"""scripts/performance_run.py: one run of every benchmark writes the performance page's
tables, each headed by the run's date, commit and machine (a --quick run of the
benchmarks no other test runs here; the others' tables are rendered from their own
tests' runs), and the run's summary."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pzq.bench import page_tables
from pzq.bench.machine import this_machine
from pzq.bench.performance_run import BENCHMARKS, Outcome, write_summary
from tests.support.page_tables import parsed

SCRIPT = Path(__file__).parents[2] / "scripts" / "performance_run.py"
HEADER = (":Run: ", ":Code: commit ", ":Machine: ", ":Software: Python ", ":Command: ``scripts/")


# The benchmarks that test_bench.py and test_bench_peers.py do not run: the others'
# tables are rendered there from the figures their runs write.
RUN_HERE = ("shards", "capacity", "backup")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_quick_run_writes_every_table_asked_for_with_its_run_machine_and_commit(tmp_path):
    ran = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", ",".join(RUN_HERE),
                          "--out", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=500,
                         check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for name in RUN_HERE:
        text = (tmp_path / f"{name}.rst").read_text()
        for field in HEADER:
            assert f"\n{field}" in text, (name, field, text[:1000])
        assert "A ``--quick`` run" in text
        assert ".. list-table::" in text and "   * - " in text, name
        assert json.loads((tmp_path / f"{name}.json").read_text())
        parsed(text)
    assert sorted(path.name for path in tmp_path.glob("*.rst")) == sorted(
        f"{name}.rst" for name in RUN_HERE)  # only those; no summary of a part of a run


def test_the_summary_lists_every_benchmark_with_its_command_and_time(tmp_path):
    began = datetime(2026, 11, 29, 7, 3, tzinfo=UTC)
    outcomes = {benchmark.name: Outcome(["scripts/" + benchmark.script, *benchmark.full],
                                        began, 61.0 if index else 5.0,
                                        "exited with 1" if index == 2 else None)
                for index, benchmark in enumerate(BENCHMARKS)}
    write_summary(outcomes, this_machine(), argparse.Namespace(quick=False, out=tmp_path))
    summary = (tmp_path / "run.rst").read_text()
    assert all(f"   * - {benchmark.name}\n" in summary for benchmark in BENCHMARKS)
    assert "     - 07:03 UTC\n     - 5 s\n" in summary
    assert "1 min 1 s (failed: exited with 1)" in summary
    assert summary.count("``scripts/") == len(BENCHMARKS)
    parsed(summary)


@pytest.mark.timeout(60)
def test_an_unknown_table_is_a_usage_error(tmp_path):
    ran = subprocess.run([sys.executable, str(SCRIPT), "--only", "groups,nope",
                          "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=50, check=False)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.splitlines()[-1].endswith("'nope' is not a table: choose from "
                                                 + ", ".join(b.name for b in BENCHMARKS))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(60)
def test_an_original_that_is_not_a_file_is_a_usage_error(tmp_path):
    ran = subprocess.run([sys.executable, str(SCRIPT), "--original", str(tmp_path / "none"),
                          "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=50, check=False)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.splitlines()[-1].endswith("none: not a file")
    assert list(tmp_path.iterdir()) == []  # nothing ran


PEERS = [{"figure": "produce 100 B, window 100, ACK after write", "unit": "msg/s",
          "pzq": {"median": 50_000.0, "repeats": [50_000.0, 48_000.0]},
          "JetStream": {"median": 20_000.0, "repeats": [20_000.0, 21_000.0]},
          "pzq/NATS": {"median": 2.4, "repeats": [2.5, 2.3]}},
         {"figure": "asyncio: produce", "unit": "msg/s",
          "pzq": {"median": 40_000.0, "repeats": [40_000.0]},
          "pzq asyncio/sync": {"median": 0.8, "repeats": [0.8]}}]


def test_a_peer_that_did_not_run_has_its_cells_marked_not_run():
    sync, aio = page_tables.peers(PEERS, ["Redis Streams"])
    assert sync.heads == ["figure", "unit", "pzq", "Redis Streams", "JetStream", "pzq/Redis",
                          "pzq/NATS"]
    assert sync.rows == [["produce 100 B, window 100, ACK after write", "msg/s", "49 000",
                          "not run", "20 500", "not run", "2.40 (2.30-2.50)"]]
    assert aio.rows[0][-1] == "0.80" and aio.rows[0][3] == "not run"
    parsed(sync.rst() + "\n" + aio.rst())


def test_the_rows_only_the_full_run_measures_have_tables_too():
    """Spark's rows and the C++ original's column are measured only in the full run
    (with Spark and --original): the form of the figures test_bench.py checks."""
    (table,) = page_tables.zper([
        {"what": "Spark batch read (every column)", "rows": 3000, "rows_per_s": 90_000.0,
         "parquet_rows_per_s": 400_000.0, "vs_parquet": 0.225},
        {"what": "streaming, write to row in the sink", "rows": 40, "p50_ms": 350.0,
         "p99_ms": 800.0}], [])
    assert table.rows == [
        ["Spark batch read (every column), 3 000 rows", "90 000 rows/s", "",
         "Parquet 400 000 rows/s", "0.23"],
        ["streaming, write to row in the sink, 40 rows", "p50 350 ms, p99 800 ms", "", "", ""]]
    (table,) = page_tables.ceiling([
        {"scenario": "drain 100 B", "target": "original", "rate": 1300.0, "p50_ms": 0.0,
         "p99_ms": 0.0, "rss_mb": 0.0, "ratio": None, "vs_original": None, "extra": {}},
        {"scenario": "drain 100 B", "target": "pzq", "rate": 27_000.0, "p50_ms": 0.0,
         "p99_ms": 0.0, "rss_mb": 0.0, "ratio": 0.39, "vs_original": 20.77, "extra": {}}], [])
    assert table.heads[-1] == "/orig" and table.rows[1][-2:] == ["0.39", "20.77"]
    parsed(table.rst())


def test_the_ceiling_table_gives_a_row_of_rounds_its_ranges():
    """scripts/bench.py's window-1 rows are medians over rounds, their ratios each
    taken within a round; figures written before the rounds (no ranges) still render."""
    base = {"scenario": "produce 100 B window 1", "p50_ms": 0.13, "p99_ms": 0.35,
            "rss_mb": 0.0, "extra": {}}
    (table,) = page_tables.ceiling([
        {**base, "target": "ceiling", "rate": 6340.0, "ratio": None, "vs_original": None,
         "rounds": 5, "rate_range": [4200.0, 11900.0], "ratio_range": None,
         "vs_original_range": None},
        {**base, "target": "pzq", "rate": 5511.0, "ratio": 0.87, "vs_original": 0.61,
         "rounds": 5, "rate_range": [5000.0, 6000.0], "ratio_range": [0.8, 0.95],
         "vs_original_range": [0.55, 0.7]},
        {**base, "target": "pzq", "rate": 5511.0, "ratio": 0.87, "vs_original": 0.61}], [])
    assert table.rows[0][2] == "6 340 (4 200-11 900)" and table.rows[0][-2:] == ["", ""]
    assert table.rows[1][2] == "5 511 (5 000-6 000)"
    assert table.rows[1][-2:] == ["0.87 (0.80-0.95)", "0.61 (0.55-0.70)"]
    assert table.rows[2][2] == "5 511" and table.rows[2][-2:] == ["0.87", "0.61"]
    parsed(table.rst())


def test_the_original_s_binary_is_shown_as_the_command_that_builds_it():
    """A table's command line names no path of the machine it ran on."""
    from pzq.bench.performance_run import without_machine_paths
    assert without_machine_paths("/home/someone/.cache/pzq-original/build/pzq") \
        == '"$(scripts/build-original)"'
    assert without_machine_paths("--count") == "--count"
    assert without_machine_paths("20000") == "20000"
