"""A groups benchmark row over its repeats: medians, ranges and whether the target is met."""

import os
import subprocess
from datetime import UTC, datetime

import pytest

import pzq
from pzq.bench.groups import Row
from pzq.bench.run_line import run_line

pytestmark = pytest.mark.timeout(10)


def test_a_row_gives_the_median_of_its_repeats_with_their_range():
    row = Row("drain, 3 groups at once: g1", "ratio >= 0.8", 0.8)
    for rate, ratio in ((900.0, 0.9), (300.0, 0.3), (1000.0, 1.0)):
        row.add(rate, ratio)
    row.cpu(20.0, 10.0)
    row.cpu(40.0, 30.0)
    found = row.summary()
    assert (found["rate"], found["rate_range"]) == (900.0, [300.0, 1000.0])
    assert (found["ratio"], found["ratio_range"]) == (0.9, [0.3, 1.0])
    assert (found["node_cpu_us"], found["consumer_cpu_us"]) == (30.0, 20.0)
    assert found["met"] is True and "p50_ms" not in found


def test_a_row_misses_its_target_on_the_median_ratio_or_the_median_p99_ratio():
    slow = Row("slow", "ratio >= 1", 1.0)
    slow.add(100.0, 0.5)
    slow.add(300.0, 1.5)
    slow.add(200.0, 0.9)
    assert slow.met() is False
    late = Row("late", "ratio >= 1, p99 ratio <= 1", 1.0, 1.0)
    late.add(100.0, 1.2, 5.0, 40.0, 2.0)
    assert late.met() is False
    assert Row("a baseline").met() is None


def test_the_peers_table_gives_the_asyncio_client_over_the_sync_one_within_each_repeat():
    from pzq.bench.peer_table import OVER_SYNC, Table

    table = Table([("pzq", "pzq"), ("Redis Streams", "Redis")])
    for sync, aio, redis_aio in ((100.0, 90.0, 45.0), (200.0, 100.0, 50.0)):
        table.add_repeat({"pzq": {"produce": sync, "aio produce": aio},
                          "Redis Streams": {"aio produce": redis_aio}})
    found = {row["figure"]: row for row in table.summary()}
    produced = found["asyncio: produce"]
    assert produced[OVER_SYNC] == {"median": 0.7, "repeats": [0.9, 0.5]}
    assert produced["pzq/Redis"]["repeats"] == [2.0, 2.0]
    assert OVER_SYNC not in found["produce 100 B, window 100, ACK after write"]
    lines = table.lines()
    assert lines[0].endswith(OVER_SYNC)
    (row,) = [line for line in lines if line.startswith("asyncio: produce ")]
    assert row.endswith("0.70 (0.50-0.90)")


def test_a_window_one_row_gives_medians_and_the_ratios_taken_within_each_round():
    """The ceiling, pzq and the original in turn each round: a ratio is one round's,
    so a round where the ceiling fell slow does not move the others."""
    from pzq.bench.rounds import Rounds

    rounds = Rounds("produce 100 B window 1",
                    ceiling=[(6000.0, 0.1, 0.3), (12000.0, 0.2, 0.4), (4000.0, 0.3, 0.5)],
                    pzq=[(5400.0, 0.2, 0.6), (6000.0, 0.1, 0.5), (4400.0, 0.3, 0.4)],
                    original=[(9000.0, 0.1, 0.2), (8000.0, 0.1, 0.2), (11000.0, 0.1, 0.2)])
    ceiling, original, ours = rounds.figures()
    assert [f.target for f in (ceiling, original, ours)] == ["ceiling", "original", "pzq"]
    assert (ceiling.rate, ceiling.rate_range, ceiling.rounds) == (6000.0, [4000.0, 12000.0], 3)
    assert (ceiling.p50_ms, ceiling.p99_ms) == (0.2, 0.4)
    assert ceiling.ratio is None and original.ratio is None and original.vs_original is None
    assert (ours.rate, ours.rate_range) == (5400.0, [4400.0, 6000.0])
    # 0.9, 0.5 and 1.1 within the rounds, where the medians' ratio is 0.9
    assert (ours.ratio, ours.ratio_range) == (0.9, [0.5, 1.1])
    assert (ours.vs_original, ours.vs_original_range) == (0.6, [0.4, 0.75])
    assert rounds.ceiling_medians() == (6000.0, 0.2, 0.4)


def test_a_row_without_the_original_has_no_ratio_to_it():
    from pzq.bench.rounds import Rounds

    (ceiling, ours) = Rounds("x", ceiling=[(100.0, 0.0, 0.0)], pzq=[(90.0, 0.0, 0.0)]).figures()
    assert (ours.ratio, ours.ratio_range, ours.rounds) == (0.9, [0.9, 0.9], 1)
    assert ours.vs_original is None and ours.vs_original_range is None


def test_the_printed_table_gives_a_row_of_rounds_its_ranges(capsys):
    from pzq.bench.report import print_table
    from pzq.bench.rounds import Rounds

    print_table(Rounds("produce 100 B window 1",
                       ceiling=[(6000.0, 0.1, 0.3), (12000.0, 0.2, 0.4)],
                       pzq=[(5400.0, 0.2, 0.6), (6000.0, 0.1, 0.5)]).figures())
    _, ceiling, ours = capsys.readouterr().out.splitlines()
    assert ceiling.split()[-3:] == ["(6000-12000)", "0.15", "0.35"]
    assert ours.split()[-2:] == ["0.70", "(0.50-0.90)"]


# -- the run line a benchmark prints before its table -----------------------------------

def _git(directory, *arguments):
    return subprocess.run(["git", "-C", str(directory), *arguments], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_the_run_line_says_when_which_commit_and_what_machine(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    _git(clone, "init", "-q")
    (clone / "a.txt").write_text("one\n")
    _git(clone, "add", "a.txt")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    commit = _git(clone, "rev-parse", "--short", "HEAD")
    line = run_line(datetime(2026, 11, 29, 2, 14, 30, tzinfo=UTC), clone)
    assert line.startswith(f"run: 2026-11-29 02:14 UTC, commit {commit}, "
                           f"{os.cpu_count()} cores (")
    assert ", load " in line and ", Python 3." in line
    (clone / "a.txt").write_text("two\n")
    assert f"commit {commit} with uncommitted changes," in run_line(datetime.now(UTC), clone)
    assert f", pzq {pzq.__version__} (not a git checkout), " in run_line(datetime.now(UTC),
                                                                       tmp_path)
