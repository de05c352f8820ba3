"""Short soaks: SIGKILLs, partitions and full disks at random moments lose no ACKed
message."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "scripts" / "chaos.py"


def load_chaos():  # noqa: ANN201 - the soak script as a module
    spec = importlib.util.spec_from_file_location("chaos", SCRIPT)
    chaos = importlib.util.module_from_spec(spec)
    sys.modules["chaos"] = chaos  # its dataclasses look their module up there
    spec.loader.exec_module(chaos)
    return chaos


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nodes, kills", [(1, 4), (3, 3)], ids=["single-node", "cluster"])
def test_short_soak_loses_nothing(tmp_path, nodes, kills):
    report = load_chaos().run(nodes_count=nodes, seconds=6.0, kills=kills, seed=7,
                              directory=tmp_path)
    print(report)
    assert report.restarts == kills
    assert report.acked > 1000
    assert report.lost == 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_soak_with_partitions_and_full_disks_loses_nothing(tmp_path):
    chaos = load_chaos()
    try:
        report = chaos.run(nodes_count=3, seconds=8.0, kills=1, partitions=3, disk_fulls=2,
                           seed=11, directory=tmp_path)
    except chaos.Unavailable as exc:
        pytest.skip(str(exc))
    print(report)
    assert (report.restarts, report.partitions, report.disk_fulls) == (1, 3, 2)
    assert report.acked > 1000
    assert report.lost == 0
    assert report.consumed >= report.acked


def test_partitions_need_a_cluster():
    chaos = load_chaos()
    with pytest.raises(chaos.Unavailable, match="--nodes 3"):
        chaos.run(nodes_count=1, seconds=1.0, kills=0, partitions=1)
