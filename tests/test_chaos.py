"""A short crash soak: SIGKILLs at random moments lose no ACKed message."""

from __future__ import annotations

import pytest

from pzq import chaos


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nodes, kills", [(1, 4), (3, 3)], ids=["single-node", "cluster"])
def test_short_soak_loses_nothing(tmp_path, nodes, kills):
    report = chaos.run(nodes_count=nodes, seconds=6.0, kills=kills, seed=7, directory=tmp_path)
    print(report)
    assert report.restarts == kills
    assert report.acked > 1000
    assert report.lost == 0
