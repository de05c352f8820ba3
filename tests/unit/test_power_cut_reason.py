"""Where FUSE's Python side is missing, the power-loss script and test say how this
project installs it, into the environment they run in."""

from __future__ import annotations

import sys

import pytest

from tests.support.power_cut import unavailable


@pytest.mark.timeout(10)
def test_missing_mfusepy_names_the_command_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mfusepy", None)  # find_spec: not importable here
    reason = unavailable()
    assert reason is not None and reason.startswith("no mfusepy")
    assert "scripts/ensure-env test" in reason
    assert sys.prefix in reason
