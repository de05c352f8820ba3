"""The benchmark runs end to end (a few hundred messages); it asserts no speed."""

from __future__ import annotations

import json
import os

import pytest

from pzq.cli import bench
from tests.support.page_tables import renders_as_its_page_table


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
    # the window-1 rows in rounds (one in the smoke plan): each ratio's range beside it
    rounds = {"produce 100 B window 1", "produce 100 B window 1, --hard-sync"}
    window1 = [f for f in figures if f["scenario"] in rounds]
    assert len(window1) == 4  # the ceiling and pzq of each
    for figure in window1:
        assert figure["rounds"] == 1 and figure["rate_range"] == [figure["rate"]] * 2
        if figure["target"] == "pzq":
            assert figure["ratio_range"] == [figure["ratio"]] * 2
    assert (tmp_path / "b.png").stat().st_size > 5_000
    printed = capsys.readouterr()
    assert "/ceil" in printed.out
    # a run of minutes says each scenario as it starts, not only its table at the end
    said = [line for line in printed.err.splitlines() if line.startswith("pzq-bench: measuring ")]
    for figure in figures:
        name = figure["scenario"].split(":")[0]
        assert any(line.startswith(f"pzq-bench: measuring {name}") for line in said), name
    renders_as_its_page_table("ceiling", tmp_path / "b.json")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path, reason", [("missing-binary", "is not a file"),
                                          (None, "does not look like the original pzq")])
def test_original_that_is_not_the_original_is_refused(tmp_path, capsys, path, reason):
    binary = tmp_path / path if path else tmp_path / "impostor"
    if path is None:
        binary.write_text("#!/bin/sh\necho hello\n")
        binary.chmod(0o755)
    with pytest.raises(SystemExit) as exited:
        bench.main(["--smoke", "--original", str(binary)])
    assert exited.value.code == 2
    assert reason in capsys.readouterr().err


ORIGINAL = os.environ.get("PZQ_ORIGINAL")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not ORIGINAL, reason="set PZQ_ORIGINAL to the original's binary "
                                         "(scripts/build-original builds one)")
def test_benchmark_measures_the_original_in_the_same_run(tmp_path):
    assert bench.main(["--smoke", "--json", str(tmp_path / "b.json"),
                       "--original", str(ORIGINAL)]) == 0
    figures = json.loads((tmp_path / "b.json").read_text())
    originals = {f["scenario"] for f in figures if f["target"] == "original"}
    assert {"produce 100 B window 1", "drain 100 B", "end to end 100 B window 100"} <= originals
    compared = [f for f in figures if f["target"] == "pzq" and f["scenario"] in originals]
    assert compared and all(f["vs_original"] > 0 for f in compared)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zper_benchmark_smoke_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "scripts" / "zper_bench.py"
    ran = subprocess.run([sys.executable, str(script), "--count", "2000", "--no-spark",
                          "--json", str(tmp_path / "z.json")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=200, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    rows = {row["what"]: row for row in json.loads((tmp_path / "z.json").read_text())}
    for mode in (0, 1):
        for size in (100, 4096):
            row = rows[f"ZPWriter mode {mode}, {size} B"]
            assert row["msg_per_s"] > 0 and row["vs_ceiling"] > 0 and row["vs_dd"] > 0
    assert rows["FETCH, 1 MiB at a time"]["vs_files"] > 0
    renders_as_its_page_table("zper", tmp_path / "z.json", ["Spark"])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_zper_benchmark_spark_only_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "scripts" / "zper_bench.py"
    ran = subprocess.run([sys.executable, str(script), "--spark-only", "--spark-rows", "3000",
                          "--stream-seconds", "4", "--json", str(tmp_path / "z.json")],
                         cwd=tmp_path,
                         capture_output=True, text=True, timeout=360, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    rows = {row["what"]: row for row in json.loads((tmp_path / "z.json").read_text())}
    assert set(rows) == {"Spark batch read (every column)", "streaming, write to row in the sink"}
    assert rows["Spark batch read (every column)"]["rows"] == 3000
    assert rows["Spark batch read (every column)"]["vs_parquet"] > 0
    assert rows["streaming, write to row in the sink"]["p50_ms"] > 0


@pytest.mark.timeout(60)
def test_a_worker_that_dies_fails_the_run_at_once_and_none_is_left():
    import multiprocessing
    import time

    from pzq.bench.load import produce_load
    from pzq.bench.measure import run_workers
    from pzq.errors import WorkerFailed

    started = time.monotonic()
    with pytest.raises(WorkerFailed, match="produce_load exited with 1"):
        # connect() refuses the endpoint: the worker dies before it answers
        run_workers([(produce_load, ("not-an-endpoint", 10, 100, 10))], answer_timeout=30)
    assert time.monotonic() - started < 20  # not the answer timeout
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(120)
def test_groups_benchmark_ends_after_its_table(tmp_path):
    """Python waits at exit for every child process and thread left behind: the script
    must end by itself, its nodes stopped."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "scripts" / "bench_groups.py"
    # one repeat: the medians and ranges over repeats are tested on their own
    ran = subprocess.run([sys.executable, str(script), "--count", "400", "--repeats", "1",
                          "--json", str(tmp_path / "g.json")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=100, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    rows = json.loads((tmp_path / "g.json").read_text())
    assert len(rows) == 17 and all(row["rate"] > 0 for row in rows)
    assert all(row["rate_range"] == [row["rate"]] * 2 for row in rows)
    drain = next(row for row in rows if row["scenario"] == "drain, 3 groups at once: g1")
    assert drain["target"] == "ratio >= 0.8" and len(drain["ratio_range"]) == 2
    assert next(row for row in rows if "all three" in row["scenario"])["node_cpu_us"] > 0
    assert any(row["scenario"] == "end to end window 100, a group, 1000 credits, one ACK each"
               for row in rows)
    assert "a group, 100 credits, one ACK per read" in ran.stdout.splitlines()[-1]
    renders_as_its_page_table("groups", tmp_path / "g.json")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("script, option", [("bench_groups.py", "--repeats"),
                                            ("bench_groups.py", "--count"),
                                            ("bench_peers.py", "--count"),
                                            ("bench_peers.py", "--repeats"),
                                            ("zper_bench.py", "--count"),
                                            ("zper_bench.py", "--spark-rows"),
                                            ("zper_bench.py", "--fetch-only"),
                                            ("backup_pause.py", "--stored"),
                                            ("capacity.py", "--count"),
                                            ("bench_scheduled.py", "--repeats"),
                                            ("bench_scheduled.py", "--count"),
                                            ("bench_scheduled.py", "--backlog")])
def test_a_benchmark_count_of_zero_is_a_usage_error(script, option):
    import subprocess
    import sys
    from pathlib import Path

    ran = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "scripts" / script),
                          option, "0"], capture_output=True, text=True, timeout=50, check=False)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.splitlines()[-1].endswith(f"argument {option}: 0 is not above 0")
    assert "Traceback" not in ran.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("script", ["authorization_cost.py", "backup_pause.py",
                                    "bench_groups.py", "bench_replay.py", "bench_scheduled.py",
                                    "bench_shards.py", "capacity.py", "zper_bench.py",
                                    "bench_peers.py", "bench.py"])
def test_figures_for_a_missing_directory_are_a_usage_error(script, tmp_path):
    """--json into a directory that is not there ended the run, minutes of it, in a
    FileNotFoundError traceback as it wrote the figures, which were lost."""
    import subprocess
    import sys
    from pathlib import Path

    figures = tmp_path / "no-such-directory" / "figures.json"
    ran = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "scripts" / script),
                          "--json", str(figures)],
                         capture_output=True, text=True, timeout=50, check=False)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr.splitlines()[-1].endswith(
        f"argument --json: {figures}: there is no directory {figures.parent}")


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except FileNotFoundError:  # it has exited
        return []


@pytest.mark.timeout(90)
def test_ctrl_c_stops_a_script_mid_run_without_a_traceback(tmp_path):
    """Ctrl-C reaches every process of the terminal's group: the script (here chaos.py,
    with its node running) ends with exit 130 and no KeyboardInterrupt traceback."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.harness import wait_until

    def at_a_terminal() -> None:  # a group of its own, SIGINT at its default
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    script = subprocess.Popen([sys.executable, str(Path(__file__).parents[2] / "scripts" /
                                                   "chaos.py"), "--seconds", "60", "--kills", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, preexec_fn=at_a_terminal)
    try:
        wait_until(lambda: children_of(script.pid), timeout=40)  # its node started
        os.killpg(script.pid, signal.SIGINT)
        _, err = script.communicate(timeout=40)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()
    assert script.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


@pytest.mark.timeout(60)
def test_a_benchmark_that_fails_leaves_no_node_running(tmp_path):
    """A run that ended in an exception between a node's start and its stop (a worker
    that failed, a Ctrl-C sent to the script alone) left that node running, its ports
    and directory held, after the script had exited."""
    import os
    import subprocess
    import sys

    from tests.support.harness import wait_until

    program = (f"from pathlib import Path\nfrom pzq.bench.nodes import NodeProcess\n"
               f"node = NodeProcess(Path({str(tmp_path / 'db')!r})).start()\n"
               "print(node.process.pid, flush=True)\n"
               "raise RuntimeError('the measure failed')\n")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=50, check=False)
    assert ran.returncode == 1 and "the measure failed" in ran.stderr
    node_pid = int(ran.stdout)

    def gone() -> bool:
        try:
            os.kill(node_pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{node_pid}/stat") as stat:  # a zombie not yet reaped by init
            return stat.read().split(")")[-1].split()[0] == "Z"

    try:
        assert wait_until(gone, timeout=10)
    finally:
        if not gone():
            os.kill(node_pid, 9)


@pytest.mark.timeout(60)
def test_a_replay_rate_of_zero_is_a_usage_error():
    """The node refuses --replay-rate 0 at start: the benchmark ended in a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    ran = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "scripts" /
                                              "bench_replay.py"), "--rates", "1000,0"],
                         capture_output=True, text=True, timeout=50, check=False)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr.splitlines()[-1].endswith("--rates 1000,0: each rate above 0")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("option", ["--sizes", "--load"])
def test_a_power_loss_range_from_above_to_is_a_usage_error(option):
    """--sizes 5 1 ended in randrange's ValueError traceback (after mounting FUSE where
    there is one); --load 4 1 ran, its loads drawn from a range given backwards."""
    import subprocess
    import sys
    from pathlib import Path

    ran = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "scripts" /
                                              "power_loss.py"), option, "5", "1"],
                         capture_output=True, text=True, timeout=50, check=False)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert "FROM must not be above TO" in ran.stderr.splitlines()[-1]
    assert "Traceback" not in ran.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_shards_benchmark_smoke_run(tmp_path, capsys):
    """pzq-bench --shards 2: one node and two shards under the same keyed load, every
    figure in the table and the JSON, each ratio taken within the repeat."""
    assert bench.main(["--shards", "2", "--smoke", "--json", str(tmp_path / "s.json")]) == 0
    printed = capsys.readouterr().out
    assert "2 shards" in printed and "node CPU, drain" in printed
    figures = json.loads((tmp_path / "s.json").read_text())["figures"]
    assert {"produce", "drain", "end to end", "end to end p99"} <= set(figures)
    for figure in figures.values():
        assert figure["one"] > 0 and figure["shards"] > 0
        assert figure["ratio"] == pytest.approx(figure["shards"] / figure["one"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script, arguments, last_words, table", [
    ("bench_scheduled.py", ["--backlog", "2000", "--count", "500", "--repeats", "1"],
     "over 1 repeats", "scheduled"),
    ("bench_replay.py", ["--archived", "300", "--seconds", "1", "--rates", "1000",
                         "--repeats", "1"], "beside", "replay"),
    ("authorization_cost.py", ["--count", "500", "--runs", "1"], "}", "authorization")])
def test_the_time_replay_and_authorization_benchmarks_run_to_their_figures(
        tmp_path, script, arguments, last_words, table):
    """Short runs of the benchmarks behind docs/time.rst's, the replay's and the
    authorization's figures: each ends by itself, its nodes stopped, with its table."""
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / script
    ran = subprocess.run([sys.executable, str(path), *arguments, "--json",
                          str(tmp_path / "f.json")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=100, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = ran.stdout.strip().splitlines()
    assert lines and last_words in "\n".join(lines[-3:]), ran.stdout[-2000:]
    renders_as_its_page_table(table, tmp_path / "f.json")


@pytest.mark.timeout(10)
def test_a_power_loss_round_is_a_line_with_units():
    """Each round printed its dataclass's repr (Round(acked=13762, lost=976,
    oldest_lost_age_s=0.361, ...)): no unit, the field names for words."""
    from tests.support.power_loss import Round

    assert str(Round(13762, 976, 0.361, 6435)) == (
        "13,762 messages ACKed, 976 lost (the oldest ACKed 0.361 s before the cut), "
        "6,435 delivered after the restart")
    assert str(Round(21799, 0, 0.0, 10998)) == (
        "21,799 messages ACKed, 0 lost (none), 10,998 delivered after the restart")
