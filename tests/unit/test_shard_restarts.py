"""pzq --shards: how soon the supervisor starts a shard that exited, and when it gives
up instead (a shard that can never start, as its start report says)."""

from __future__ import annotations

import os
import signal

import pytest

from pzq.node.options import build_config
from pzq.node.shard_layout import plan_shards
from pzq.node.shard_process import start_shard
from pzq.node.shards import Child
from pzq.node.start_report import REPORT_FD, Reported, StartReport, read_report, start_report

pytestmark = pytest.mark.timeout(10)


def child() -> Child:
    return Child(plan_shards(build_config({"shards": 2}))[1], [])


def test_the_delay_doubles_from_half_a_second_to_ten():
    shard = child()
    delays = [shard.schedule_start(now=1.0 + exit) for exit in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert shard.start_at == 8.0 + 10.0


def test_a_shard_that_ran_a_while_starts_after_the_first_delay_again():
    shard = child()
    for exit in range(4):
        shard.schedule_start(now=float(exit))
    shard.started_at = 100.0
    assert shard.schedule_start(now=129.0) == 8.0  # not long enough
    shard.started_at = 200.0
    assert shard.schedule_start(now=230.0) == 0.5


@pytest.mark.parametrize("code, gives_up", [(2, True), (3, True), (1, False), (4, False),
                                            (0, False), (-9, False)])
def test_only_a_configuration_or_store_error_before_ready_stops_the_supervisor(code, gives_up):
    shard = child()
    assert shard.cannot_start(code) is gives_up
    shard.ever_ready = True  # it ran: the same error later may pass (a disk freed, say)
    assert shard.cannot_start(code) is False


def report_pipe(monkeypatch: pytest.MonkeyPatch) -> tuple[StartReport, int]:
    read_end, write_end = os.pipe()
    monkeypatch.setenv(REPORT_FD, str(write_end))
    return start_report(), read_end


def test_a_shard_reports_ready_or_its_error_line_on_its_pipe(monkeypatch):
    report, read_end = report_pipe(monkeypatch)
    assert REPORT_FD not in os.environ  # not handed on to what the node might start
    report.failed("--partitions: topic orders has 16 partitions;\nfixed")
    os.close(report.fd)
    assert read_report(read_end) == Reported(False, "--partitions: topic orders has 16 "
                                                    "partitions; fixed")
    report, read_end = report_pipe(monkeypatch)
    report.ready()
    report.failed("store write failed")  # after it served: not a start failure
    os.close(report.fd)
    assert read_report(read_end) == Reported(True, "store write failed")


def test_a_node_without_a_supervisor_reports_nothing(monkeypatch):
    monkeypatch.delenv(REPORT_FD, raising=False)
    report = start_report()
    assert type(report) is StartReport
    report.ready()
    report.failed("anything")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_that_comes_while_a_shard_starts_stops_it_gracefully(tmp_path, signum):
    """The supervisor forwards a stop to a shard it has just started again: the shard,
    still importing, holds the signal until its handlers are in place, then stops as
    on request (exit 0), instead of dying by Python's default handler."""
    process, report_fd = start_shard([
        "--database", str(tmp_path / "db"), "--receive-dsn", f"ipc://{tmp_path}/r",
        "--send-dsn", f"ipc://{tmp_path}/s", "--monitor-dsn", f"ipc://{tmp_path}/m"])
    try:
        process.send_signal(signum)  # long before the node could install a handler
        assert process.wait(timeout=45) == 0
    finally:
        os.close(report_fd)
        if process.poll() is None:
            process.kill()
            process.wait()
