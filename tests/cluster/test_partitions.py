"""Partition scenarios, short: a 3-node cluster whose links are cut, cut one way,
flapped, split, with a node killed, while a producer and three consumers run.

Each scenario asserts:
- nothing lost: every message ACKed "1" without REPLICATION_FAILED is consumed;
- no copy left: once everything is consumed, no node holds a copy and no node
  owes a remove (polled in STATS, within the settle time);
- no figure in STATS ever below zero;
- duplicates within ``duplicate_bound``: the messages in flight at each fault.
  A message can be delivered twice only if it was somewhere between its copy and
  the remove of that copy when the fault struck (a takeover or a redelivery then
  finds it). With consumers that keep up, that is at most each producer's window
  (copied, not yet ACKed to the producer) plus each node's delivery window
  (--prefetch: delivered, not yet acked). A kill counts as a fault too.
- the fault did something (the scenario is not passing vacuously): a cut
  makes ACKs carry REPLICATION_FAILED, a kill is seen by the survivors.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.partition_cluster import ClusterTimings
from tests.support.partition_load import PRODUCER_WINDOW
from tests.support.partition_scenarios import BY_NAME, LONG, Plan, Report, Scenario, run_scenario

pytestmark = [pytest.mark.partition, pytest.mark.slow]

NODES = 3
PREFETCH = 20
SHORT = replace(LONG, warmup_s=0.8, cut_s=2.5, flap_s=4.0, flap_period_s=0.5, after_s=0.8,
                drain_s=30.0, settle_s=15.0,
                timings=ClusterTimings(timeout_nodes_us=1_000_000, ack_timeout_us=1_000_000,
                                       timeout_replication_us=300_000, prefetch=PREFETCH))
FLAP_CUTS = round(SHORT.flap_s / SHORT.flap_period_s) // 2

# Faults while messages flow, per scenario: cuts, and kills before the drain.
FAULTS = {"kill-after-drain": 0, "origin-cut": 1, "origin-cut-r2": 1, "origin-cut-kill": 2,
          "one-way-out": 1, "one-way-in": 1, "flapping": FLAP_CUTS,
          "flapping-kill": FLAP_CUTS + 1, "split": 1, "origin-restart-peer-away": 2}


def duplicate_bound(scenario: Scenario) -> int:
    in_flight = len(scenario.producers) * PRODUCER_WINDOW + NODES * PREFETCH
    return FAULTS[scenario.name] * in_flight


def run(name: str, tmp_path: Path, plan: Plan = SHORT) -> Report:
    scenario = BY_NAME[name]
    report = run_scenario(scenario, plan, tmp_path / "data", tmp_path / "logs")
    print(report.as_dict())
    return report


def check(report: Report, tmp_path: Path) -> None:
    scenario = BY_NAME[report.scenario]
    where = f"(node logs in {tmp_path / 'logs' / report.scenario}; figures {report.as_dict()})"
    assert not report.errors, where
    assert report.acked_ok > 0, where
    assert report.lost == 0, where
    for copies in (report.copies_left, report.copies_at_end):
        left = {node: figures for node, figures in copies.items()
                if figures["replicas_held"] or any(peer.get("removes_owed")
                                                  for peer in figures["peers"].values())}
        assert not left, f"copies or removes left {left} {where}"
    assert not report.negatives, where
    assert report.delivered_more_than_once <= duplicate_bound(scenario), where


def cut_struck(report: Report) -> bool:
    return report.acked_replication_failed > 0


@pytest.mark.timeout(60)
def test_a_takeover_after_a_clean_drain_delivers_nothing(tmp_path):
    report = run("kill-after-drain", tmp_path)
    check(report, tmp_path)
    assert any("seen down" in event for _, event in report.timeline)
    assert report.takeover_deliveries == 0
    assert report.delivered_more_than_once == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["origin-cut", "origin-cut-r2"])
def test_origin_cut_off_then_healed(tmp_path, name):
    report = run(name, tmp_path)
    check(report, tmp_path)
    assert cut_struck(report)


@pytest.mark.timeout(90)
def test_origin_cut_killed_healed_restarted(tmp_path):
    report = run("origin-cut-kill", tmp_path)
    check(report, tmp_path)
    assert cut_struck(report)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["one-way-out", "one-way-in"])
def test_one_way_cut(tmp_path, name):
    report = run(name, tmp_path)
    check(report, tmp_path)
    assert cut_struck(report)


@pytest.mark.timeout(60)
def test_flapping_links(tmp_path):
    report = run("flapping", tmp_path)
    check(report, tmp_path)
    assert cut_struck(report)


@pytest.mark.timeout(90)
def test_flapping_links_then_origin_killed(tmp_path):
    report = run("flapping-kill", tmp_path)
    check(report, tmp_path)
    assert cut_struck(report)


@pytest.mark.timeout(60)
def test_one_node_against_two_with_producers_on_both_sides(tmp_path):
    report = run("split", tmp_path)
    check(report, tmp_path)
    assert cut_struck(report)


@pytest.mark.timeout(90)
def test_removes_owed_to_a_holder_that_is_away_survive_the_origins_restart(tmp_path):
    report = run("origin-restart-peer-away", tmp_path)
    check(report, tmp_path)
