"""A partitioned topic's busiest owner cut off, then SIGKILLed, under keyed load.

Three nodes named alike (``partition_alike``) at replicas 1; ``orders`` declared with
``PARTITIONS`` partitions and read by the group ``billing`` through a routing group
consumer while a routing producer sends ``KEYS`` keys in turn. The node owning the
most partitions (the victim) is cut off from both others; once the survivors' route
tables give its partitions to its successors (timed), the cut lasts on, then the
victim is SIGKILLed, and producing goes on before the drain. ``OwnerRun`` holds
what the test asserts on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pzq.client import request_monitor
from pzq.cluster.placement import ranking
from pzq.protocol.headers import partition_of
from tests.support.harness import wait_until
from tests.support.partition_alike import AlikeCluster
from tests.support.partition_cluster import ClusterTimings
from tests.support.partition_keyed import KeyedConsumerLoop, KeyedProducerLoop, KeyedTally
from tests.support.partition_load import PRODUCER_WINDOW, StatsSampler, Worker

TOPIC, GROUP = "orders", "billing"
PARTITIONS, KEYS = 6, 24
PREFETCH = 20  # the group consumer's window on each node
TIMINGS = ClusterTimings(timeout_nodes_us=1_000_000, ack_timeout_us=1_000_000,
                         timeout_replication_us=300_000, prefetch=PREFETCH)


@dataclass(frozen=True)
class OwnerPlan:
    warmup_s: float = 1.0  # load before the cut
    cut_s: float = 1.0  # the cut lasts this long once the producer follows it
    after_s: float = 2.5  # load after the kill
    notice_s: float = 10.0  # most for the survivors, then the producer, to follow the cut
    drain_s: float = 30.0
    settle_s: float = 15.0


@dataclass
class OwnerRun:
    victim: int
    survivors: list[int]
    victim_partitions: list[int]
    successors: dict[int, int]  # victim's partition -> the node ranked next
    tally: KeyedTally
    receive: dict[str, int]  # receive endpoint -> node
    consume: dict[str, int]  # consume endpoint -> node
    cut_at: float = 0.0
    moved_after_s: float | None = None  # cut to the survivors' tables naming successors
    followed_after_s: float | None = None  # cut to the producer sending to a successor
    killed_at: float = 0.0
    owners_after_kill: dict[int, list[int]] = field(default_factory=dict)  # survivor -> owners
    drained: bool = False
    settled: bool = False
    settled_stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    negatives: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    producer: dict[str, int] = field(default_factory=dict)  # moved, resent, unacked
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def key_partition(self, body: bytes) -> int:
        return partition_of(body.rpartition(b":")[0], PARTITIONS)

    def note(self, started: float, event: str) -> None:
        self.timeline.append((round(time.monotonic() - started, 3), event))


def keys() -> list[bytes]:
    return [b"k%02d" % index for index in range(KEYS)]


def routes(cluster: AlikeCluster, node: int) -> dict[str, Any]:
    table: dict[str, Any] = json.loads(request_monitor(cluster.nodes[node].monitor_dsn,
                                                      "ROUTES", 5))
    return table


def owner_nodes(cluster: AlikeCluster, node: int) -> list[int] | None:
    """The owner of each partition in ``node``'s table, as node numbers."""
    owners = routes(cluster, node)["topics"].get(TOPIC, {}).get("owners")
    return [cluster.cluster_endpoints.index(owner) for owner in owners] if owners else None


def run_owner_scenario(directory: Path, plan: OwnerPlan) -> OwnerRun:
    with AlikeCluster(directory / "data", 3, 1, TIMINGS, consume=True) as cluster:
        try:
            cluster.start(30)
            return _measure(cluster, plan)
        finally:
            logs = directory / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            for index, node in enumerate(cluster.nodes):
                (logs / f"node{index}.log").write_text("\n".join(node.log_lines()) + "\n")


def _declare(cluster: AlikeCluster) -> list[int]:
    cluster.nodes[0].ask(f"DECLARE TOPIC {TOPIC} partitions={PARTITIONS}")

    # The clients take the table from one node: it must name every node's endpoints
    # (a peer's come with its ROUTING, a heartbeat after it is up), or they reach the
    # victim only at their next refresh, after the cut.
    def agreed() -> list[int] | None:
        if not all("receive" in entry and "consume" in entry
                   for node in range(cluster.size)
                   for entry in routes(cluster, node)["nodes"].values()):
            return None
        tables = [owner_nodes(cluster, node) for node in range(cluster.size)]
        return tables[0] if tables[0] and all(t == tables[0] for t in tables) else None
    owners: list[int] = wait_until(agreed, 20, interval=0.1,
                                   message="one table on every node, naming every node")
    return owners


def _measure(cluster: AlikeCluster, plan: OwnerPlan) -> OwnerRun:
    owners = _declare(cluster)
    victim = max(range(cluster.size), key=owners.count)
    survivors = cluster.others(victim)
    mine = [p for p, owner in enumerate(owners) if owner == victim]
    ranked = {p: [cluster.cluster_endpoints.index(e)
                  for e in ranking(TOPIC, p, cluster.cluster_endpoints)] for p in mine}
    tally = KeyedTally()
    run = OwnerRun(victim, survivors, mine, {p: ranked[p][1] for p in mine}, tally,
                   {node.receive_dsn: i for i, node in enumerate(cluster.nodes)},
                   {node.consume_dsn: i for i, node in enumerate(cluster.nodes)})
    # the clients ask the survivors first: the table of the side that keeps a majority
    monitors = [cluster.nodes[i].monitor_dsn for i in (*survivors, victim)]
    consumer = KeyedConsumerLoop(monitors, TOPIC, GROUP, PREFETCH, tally)
    consumer.start()
    if not consumer.ready.wait(30):
        raise TimeoutError(f"the group consumer did not start: {consumer.error!r}")
    producer = KeyedProducerLoop(monitors, TOPIC, keys(), PRODUCER_WINDOW, tally)
    sampler = StatsSampler(cluster.stats, cluster.size)
    workers: list[Worker] = [consumer, sampler, producer]
    producer.start()
    sampler.start()
    started = time.monotonic()
    try:
        _faults(cluster, run, plan, started)
        producer.stop(30)
        run.note(started, "producer stopped")
        run.drained = _wait(tally.all_acked_consumed, plan.drain_s)
        run.note(started, "drained" if run.drained else "drain timed out")
        run.settled = _wait(lambda: _no_copies(cluster, survivors), plan.settle_s)
        run.settled_stats = {i: s for i in survivors if (s := cluster.stats(i)) is not None}
    finally:
        for worker in workers:
            worker.stop()
    run.producer = {"moved": producer.moved, "resent": producer.resent,
                    "unacked": producer.unacked}
    run.negatives = [f"node{n.node} {n.figure} = {n.value}" for n in sampler.negatives]
    run.errors = [f"{w.name}: {w.error!r}" for w in workers if w.error]
    return run


def _faults(cluster: AlikeCluster, run: OwnerRun, plan: OwnerPlan, started: float) -> None:
    time.sleep(plan.warmup_s)  # the load runs meanwhile
    run.note(started, f"isolate node{run.victim}")
    cluster.isolate(run.victim)
    run.cut_at = time.monotonic()

    def moved() -> bool:
        return all((owners := owner_nodes(cluster, node)) is not None
                   and all(owners[p] == run.successors[p] for p in run.victim_partitions)
                   for node in run.survivors)
    wait_until(moved, plan.notice_s, interval=0.05, message="the victim's partitions moved")
    run.moved_after_s = round(time.monotonic() - run.cut_at, 3)
    run.note(started, "the survivors' tables name the successors")
    # the producer asks for the table every few seconds: once it sends the victim's keys
    # to their successors, both sides of the cut take messages of the same keys
    wait_until(lambda: _followed(run), plan.notice_s, interval=0.05,
               message="the producer sends to the successors")
    run.followed_after_s = round(time.monotonic() - run.cut_at, 3)
    run.note(started, "the producer sends the victim's keys to the successors")
    time.sleep(plan.cut_s)  # the cut lasts; both sides run
    run.note(started, f"SIGKILL node{run.victim}")
    cluster.nodes[run.victim].kill()
    run.killed_at = time.monotonic()
    run.owners_after_kill = {node: owners for node in run.survivors
                             if (owners := owner_nodes(cluster, node)) is not None}
    time.sleep(plan.after_s)


def _followed(run: OwnerRun) -> bool:
    successors = {endpoint for endpoint, node in run.receive.items()
                  if node in run.successors.values()}
    with run.tally.lock:
        sends = [(body, list(where)) for body, where in run.tally.sent_to.items()]
    return any(run.key_partition(body) in run.victim_partitions and when > run.cut_at
               and endpoint in successors for body, where in sends for when, endpoint in where)


def _no_copies(cluster: AlikeCluster, nodes: list[int]) -> bool:
    """No copy held, and no remove owed to a live peer (the victim's wait for it)."""
    for node in nodes:
        figures = cluster.stats(node)
        if figures is None or figures["replicas_held"]:
            return False
        live = {cluster.peer_endpoint(node, other) for other in nodes if other != node}
        if any(peer.get("removes_owed") for peer in figures["peers"]
               if peer["endpoint"] in live):
            return False
    return True


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_until(condition, timeout, interval=0.1)
    except TimeoutError:
        return False
    return True
