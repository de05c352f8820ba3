"""A short crash soak: SIGKILLs at random moments lose no ACKed message."""

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
