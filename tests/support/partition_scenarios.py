"""Partition scenarios: a 3-node cluster under network faults, with load, measured.

Each scenario starts three daemons whose links run through fault proxies
(``partition_cluster``), runs one producer at window 10 on the origin (node 0;
the split also on node 1) and an acking consumer on every node, applies its
faults, heals, stops producing, waits until every ACKed message was consumed,
and gives the removes time to reach every node (polling STATS). The report:
produced, ACKed ("1" and "1" + REPLICATION_FAILED), consumed, lost (ACKed "1"
without REPLICATION_FAILED and never consumed), messages delivered more than
once, the copies each node still holds at the end, the longest time without any
delivery, and every STATS figure seen below zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.support.harness import wait_until
from tests.support.partition_cluster import ClusterTimings, ProxiedCluster, link
from tests.support.partition_load import ConsumerLoop, ProducerLoop, StatsSampler, Tally, Worker
from tests.support.partition_report import Report, build_report

ORIGIN = 0
HOLDER = 1  # a node holding copies of the origin's messages
SLOW_LINK_S = 0.2


@dataclass(frozen=True)
class Plan:
    """How long each part of a scenario lasts, in seconds."""

    warmup_s: float = 3.0  # load before the first fault
    cut_s: float = 5.0
    flap_s: float = 20.0
    flap_period_s: float = 1.0
    after_s: float = 3.0  # load after the heal
    drain_s: float = 60.0  # most to wait for every ACKed message to be consumed
    settle_s: float = 20.0  # most to wait for the copies to go
    timings: ClusterTimings = field(default_factory=ClusterTimings)

    @property
    def notice_s(self) -> float:
        """Most to wait for the nodes to notice a kill or a return."""
        return 5 * self.timings.timeout_nodes_us / 1e6 + 5


# The timings; the suite runs shorter ones (see tests/cluster/test_partitions.py).
LONG = Plan()


class Run:
    """What a scenario's steps act on: the cluster, the plan, and a timeline."""

    def __init__(self, cluster: ProxiedCluster, plan: Plan, tally: Tally) -> None:
        self.cluster = cluster
        self.plan = plan
        self.tally = tally
        self.started = time.monotonic()
        self.timeline: list[tuple[float, str]] = []
        self.takeover_deliveries: int | None = None

    def note(self, event: str) -> None:
        self.timeline.append((round(time.monotonic() - self.started, 3), event))

    def hold(self, seconds: float) -> None:
        """Let the fault (or the load) last; the workers run meanwhile."""
        time.sleep(seconds)

    def isolate(self, node: int) -> None:
        self.note(f"isolate node{node}")
        self.cluster.isolate(node)

    def heal(self) -> None:
        self.note("heal")
        self.cluster.heal()

    def kill(self, node: int) -> float:
        self.note(f"SIGKILL node{node}")
        self.cluster.nodes[node].kill()
        return time.monotonic()

    def restart(self, node: int) -> None:
        self.note(f"restart node{node}")
        self.cluster.nodes[node].restart()
        self.cluster.wait_formed(self.plan.notice_s)
        self.note(f"node{node} back in the cluster")

    def restart_alone(self, node: int) -> None:
        """Restart without waiting for the whole cluster (some links are cut)."""
        self.note(f"restart node{node}")
        self.cluster.nodes[node].restart()

    def wait_seen_down(self, node: int) -> None:
        """Every other running node marks ``node`` down (so it may take over)."""
        for observer in self.cluster.others(node):
            wait_until(lambda o=observer: self.cluster.peer_state(o, node) in ("down", None),
                       self.plan.notice_s, interval=0.05, message=f"node{node} seen down")
        self.note(f"node{node} seen down")


# -- the scenarios' steps ------------------------------------------------------------------


def no_fault(run: Run) -> None:
    run.hold(run.plan.warmup_s + run.plan.after_s)


def origin_cut(run: Run) -> None:
    run.hold(run.plan.warmup_s)
    run.isolate(ORIGIN)
    run.hold(run.plan.cut_s)
    run.heal()
    run.hold(run.plan.after_s)


def origin_cut_killed_restarted(run: Run) -> None:
    run.hold(run.plan.warmup_s)
    run.isolate(ORIGIN)
    run.hold(run.plan.cut_s / 2)
    run.kill(ORIGIN)
    run.hold(run.plan.cut_s / 2)
    run.heal()
    run.restart(ORIGIN)
    run.hold(run.plan.after_s)


def one_way(outbound: bool) -> Callable[[Run], None]:
    def steps(run: Run) -> None:
        run.hold(run.plan.warmup_s)
        for other in run.cluster.others(ORIGIN):
            source, target = (ORIGIN, other) if outbound else (other, ORIGIN)
            run.note(f"cut node{source} -> node{target}")
            run.cluster.cut_one_way(source, target)
        run.hold(run.plan.cut_s)
        run.heal()
        run.hold(run.plan.after_s)
    return steps


def flapping(run: Run) -> None:
    run.hold(run.plan.warmup_s)
    _flap(run)
    run.hold(run.plan.after_s)


def _flap(run: Run) -> None:
    flips = max(2, round(run.plan.flap_s / run.plan.flap_period_s))
    for flip in range(flips):
        if flip % 2 == 0:
            run.cluster.isolate(ORIGIN)
        else:
            run.cluster.heal()
        run.hold(run.plan.flap_period_s)
    run.note(f"origin's links flapped {flips} times, every {run.plan.flap_period_s} s")
    run.heal()


def flapping_then_killed(run: Run) -> None:
    run.hold(run.plan.warmup_s)
    _flap(run)
    run.kill(ORIGIN)
    run.wait_seen_down(ORIGIN)
    run.hold(run.plan.cut_s)  # the survivors deliver what they took over
    run.restart(ORIGIN)
    run.hold(run.plan.after_s)


def split_one_against_two(run: Run) -> None:
    run.hold(run.plan.warmup_s)
    run.note("split node0 | node1 node2")
    run.cluster.split([ORIGIN], run.cluster.others(ORIGIN))
    run.hold(run.plan.cut_s)
    run.heal()
    run.hold(run.plan.after_s)


def holder_killed(run: Run) -> None:
    """A node holding copies of the origin's messages dies while they are consumed:
    the removes it misses must reach it once it is back."""
    run.hold(run.plan.warmup_s)
    run.kill(HOLDER)
    run.hold(run.plan.cut_s)
    run.restart(HOLDER)
    run.hold(run.plan.after_s)


def origin_restarted_while_a_holder_is_away(run: Run) -> None:
    """Removes owed to a node that is cut off survive the origin's restart."""
    run.hold(run.plan.warmup_s)
    run.isolate(HOLDER)
    run.hold(run.plan.cut_s / 2)
    run.kill(ORIGIN)
    run.restart_alone(ORIGIN)
    run.hold(run.plan.cut_s / 2)
    run.heal()
    run.hold(run.plan.after_s)


def origin_links_reset(run: Run) -> None:
    """The origin's links refuse connections (a peer's port closed, not silent)."""
    run.hold(run.plan.warmup_s)
    run.note("reset the origin's links")
    for other in run.cluster.others(ORIGIN):
        run.cluster.reset(ORIGIN, other)
    run.hold(run.plan.cut_s)
    run.heal()
    run.hold(run.plan.after_s)


def origin_links_slow(run: Run) -> None:
    """Every byte to and from the origin is late by ``SLOW_LINK_S``."""
    run.hold(run.plan.warmup_s)
    run.note(f"the origin's links delayed {SLOW_LINK_S} s each way")
    for other in run.cluster.others(ORIGIN):
        run.cluster.delay(ORIGIN, other, SLOW_LINK_S)
    run.hold(run.plan.cut_s)
    run.heal()
    run.hold(run.plan.after_s)


def kill_origin_after_drain(run: Run) -> None:
    """Everything consumed and the copies given time to go: a takeover now must
    deliver nothing."""
    killed = run.kill(ORIGIN)
    run.wait_seen_down(ORIGIN)
    survivors = run.cluster.others(ORIGIN)
    try:
        wait_until(lambda: all(_copies(run.cluster.stats(node)) == 0 for node in survivors),
                   run.plan.settle_s, interval=0.1, message="survivors hold no copies")
    except TimeoutError:
        run.note("survivors still hold copies")
    run.takeover_deliveries = run.tally.deliveries_since(killed)
    run.note(f"{run.takeover_deliveries} deliveries after the kill")


@dataclass(frozen=True)
class Scenario:
    name: str
    replicas: int
    steps: Callable[[Run], None]
    summary: str
    producers: tuple[int, ...] = (ORIGIN,)
    after_drain: Callable[[Run], None] | None = None


SCENARIOS = [
    Scenario("kill-after-drain", 1, no_fault,
             "no partition; origin SIGKILLed after the drain", after_drain=kill_origin_after_drain),
    Scenario("origin-cut", 1, origin_cut, "origin cut off, then healed"),
    Scenario("origin-cut-r2", 2, origin_cut, "origin cut off, then healed (R=2)"),
    Scenario("origin-cut-kill", 1, origin_cut_killed_restarted,
             "origin cut, SIGKILLed, healed, restarted"),
    Scenario("one-way-out", 1, one_way(outbound=True), "origin's bytes to its peers dropped"),
    Scenario("one-way-in", 1, one_way(outbound=False), "peers' bytes to the origin dropped"),
    Scenario("flapping", 1, flapping, "origin's links flapping"),
    Scenario("flapping-kill", 1, flapping_then_killed,
             "origin's links flapping, then origin SIGKILLed and restarted"),
    Scenario("split", 2, split_one_against_two,
             "node0 against node1 + node2, producers on both sides", producers=(0, 1)),
    # Beyond the table:
    Scenario("holder-killed", 1, holder_killed, "a holder of copies SIGKILLed, restarted"),
    Scenario("origin-restart-peer-away", 1, origin_restarted_while_a_holder_is_away,
             "a holder cut off; origin SIGKILLed and restarted meanwhile; healed"),
    Scenario("origin-reset", 1, origin_links_reset, "origin's links refuse connections"),
    Scenario("origin-slow", 1, origin_links_slow, f"origin's links {SLOW_LINK_S} s late"),
]
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


# -- running one ---------------------------------------------------------------------------


def _copies(figures: dict[str, Any] | None) -> int:
    """Copies a node holds, and removes it still owes its peers (0 if it is down)."""
    if figures is None:
        return 0
    owed = sum(int(peer.get("removes_owed", 0)) for peer in figures["peers"])
    return int(figures["replicas_held"]) + owed


def run_scenario(scenario: Scenario, plan: Plan, directory: Path,
                 log_dir: Path | None = None) -> Report:
    timings = plan.timings
    with ProxiedCluster(directory, 3, scenario.replicas, timings) as cluster:
        try:
            cluster.start(plan.notice_s * 3)
            return _measure(cluster, scenario, plan)
        finally:
            if log_dir is not None:
                write_logs(cluster, log_dir / scenario.name)


def _measure(cluster: ProxiedCluster, scenario: Scenario, plan: Plan) -> Report:
    tally = Tally()
    run = Run(cluster, plan, tally)
    consumers = [ConsumerLoop(node.send_dsn, index, tally)
                 for index, node in enumerate(cluster.nodes)]
    sampler = StatsSampler(cluster.stats, cluster.size)
    producers = [ProducerLoop(cluster.nodes[index].receive_dsn, tally)
                 for index in scenario.producers]
    workers: list[Worker] = [*consumers, sampler, *producers]
    for worker in workers:
        worker.start()
    try:
        scenario.steps(run)
        _stop(producers)
        run.note("producers stopped")
        drained = _wait(tally.all_acked_consumed, plan.drain_s, "every ACKed message consumed")
        run.note("drained" if drained else "drain timed out")
        drained_at = time.monotonic()
        settled = _wait(lambda: all(_copies(cluster.stats(i)) == 0 for i in range(cluster.size)),
                        plan.settle_s, "no copies left")
        run.note("no copies left" if settled else "copies left after the settle time")
        after_settle = _all_stats(cluster)
        if scenario.after_drain is not None:
            scenario.after_drain(run)
    finally:
        _stop(workers)
    sampler.sample()
    final = _all_stats(cluster)
    errors = [f"{worker.name}: {worker.error!r}" for worker in workers if worker.error]
    return build_report(scenario.name, scenario.replicas, run, sampler, drained_at,
                        after_settle, final, _peer_names(cluster), errors)


def _all_stats(cluster: ProxiedCluster) -> dict[int, dict[str, Any]]:
    return {index: figures for index in range(cluster.size)
            if (figures := cluster.stats(index)) is not None}


def _stop(workers: list[Any]) -> None:
    for worker in workers:
        worker.stopping.set()
    for worker in workers:
        worker.join(30)


def _wait(condition: Callable[[], bool], timeout: float, message: str) -> bool:
    try:
        wait_until(condition, timeout, interval=0.1, message=message)
    except TimeoutError:
        return False
    return True


def _peer_names(cluster: ProxiedCluster) -> dict[str, str]:
    """Proxy endpoint -> the node it leads to, to name per-peer figures."""
    return {proxy.endpoint: f"node{name.split('>')[1]}"
            for name, proxy in cluster.network.proxies.items()}


def write_logs(cluster: ProxiedCluster, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index, node in enumerate(cluster.nodes):
        (directory / f"node{index}.log").write_text("\n".join(node.log_lines()) + "\n")


def shorter(plan: Plan, **changes: Any) -> Plan:
    return replace(plan, **changes)


__all__ = ["LONG", "SCENARIOS", "BY_NAME", "Plan", "Scenario", "Report", "run_scenario",
           "link", "shorter"]
