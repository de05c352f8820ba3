"""The node's garbage collector setting: cyclic garbage is still freed, within a bound."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pzq.node import collector


@pytest.fixture
def tuned() -> Iterator[collector.CollectorSetting]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    try:
        yield collector.tune()
    finally:  # this test process's collector as it was
        gc.unfreeze()
        gc.set_threshold(*before)
        if enabled:
            gc.enable()


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    freed = 0

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        Cycle.freed += 1


def test_tune_freezes_start_up_and_raises_gen0(tuned: collector.CollectorSetting) -> None:
    assert tuned.thresholds[0] == collector.GEN0_THRESHOLD
    assert tuned.frozen > 0
    assert gc.isenabled()
    assert collector.setting().thresholds == tuned.thresholds


def test_cyclic_garbage_is_freed_without_asking(tuned: collector.CollectorSetting) -> None:
    """Made in a loop with no gc.collect(): what is held stays under a bound (about
    gen0's threshold), however many are made."""
    Cycle.freed = 0
    made = 0
    most_held = 0
    for _ in range(15):
        for _ in range(collector.GEN0_THRESHOLD):
            Cycle()
        made += collector.GEN0_THRESHOLD
        most_held = max(most_held, made - Cycle.freed)
    assert most_held <= 2 * collector.GEN0_THRESHOLD
    assert Cycle.freed >= made - 2 * collector.GEN0_THRESHOLD
