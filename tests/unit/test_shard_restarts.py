"""pzq --shards: how soon the supervisor starts a shard that exited."""

from __future__ import annotations

import pytest

from pzq.node.config import build_config
from pzq.node.shard_layout import plan_shards
from pzq.node.shards import Child

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
