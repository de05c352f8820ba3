#!/usr/bin/env python3
"""Topics and consumer groups: each figure beside its baseline, measured in the same run.

    .venv/bin/python scripts/bench_groups.py            # about three minutes
    .venv/bin/python scripts/bench_groups.py --count 50000 --repeats 5 --json groups.json

* produce 100 B, window 100, spread over 100 topics, against one topic;
* one topic with 3 groups drained at once, each group against one group alone;
* the same drains with the consume endpoint's protocol 2 (batches of deliveries, each
  read's keys in one ACK frame), against protocol 1;
* the consume endpoint end to end (producer window 100; the consumer's window, its
  credits, 100 and 1000; one ACK per delivery, and at 100 credits also one ACK for
  all the deliveries one read found, in protocol 1 and 2) against --send-dsn (whose
  window adapts up to --prefetch; its consumers ACK each delivery, the only way there
  is).

Every scenario and its baseline run one after the other, on fresh nodes, ``--repeats``
times; a ratio is taken within each repeat (subject over the baseline measured just
before it) and the table gives the median of the repeats and their range.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import contextlib
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pzq.bench.groups import (  # noqa: E402
    Row,
    groups_only,
    measure_group_drains,
    measure_group_end_to_end,
    measure_topic_produce,
    print_rows,
    topic_produce_load,
)
from pzq.bench.measure import measure_end_to_end, run_workers  # noqa: E402
from pzq.bench.nodes import NodeProcess  # noqa: E402
from pzq.bench.options import output_file, positive  # noqa: E402
from pzq.bench.run_line import run_line  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402

GROUPS = ["g1", "g2", "g3"]
# the group end-to-end scenarios: row, credits, whether the consumer ACKs all that one
# read found in one ACK (the protocol's ACK of several keys) or each delivery alone,
# and the consume protocol
E2E_GROUPS = [("e2e 100", 100, False, 1), ("e2e 1000", 1000, False, 1),
              ("e2e 100 per read", 100, True, 1), ("e2e 100 batches", 100, True, 2)]


class Nodes:
    """The run's nodes: each killed after its scenario, and every one still running
    killed when the run ends, also by an error (none is left behind)."""

    def __init__(self, directory: Path, stack: contextlib.ExitStack) -> None:
        self.directory = directory
        self.stack = stack
        self.started = 0

    def start(self, name: str) -> NodeProcess:
        self.started += 1
        started = NodeProcess(self.directory / f"{name}-{self.started}", consume=True).start()
        self.stack.callback(lambda: started.kill() if started.running else None)
        return started


def fill(target: NodeProcess, count: int) -> None:
    share = count // 4
    run_workers([(topic_produce_load, (target.receive_dsn, share, 100, 1000, 1))
                 for _ in range(4)])


def produce_repeat(nodes: Nodes, count: int, rows: dict[str, Row]) -> None:
    rates = {}
    for topics in (1, 100):
        target = nodes.start(f"produce-{topics}")
        rates[topics] = measure_topic_produce(target.receive_dsn, count, 100, topics)
        target.kill()
    rows["produce 1"].add(rates[1])
    rows["produce 100"].add(rates[100], rates[100] / rates[1])


def drain_repeat(nodes: Nodes, count: int, rows: dict[str, Row]) -> None:
    drains = {}
    for protocol in (1, 2):
        for groups in (GROUPS[:1], GROUPS):
            target = nodes.start(f"drain-{len(groups)}-p{protocol}")
            groups_only(target, groups)
            fill(target, count)
            assert target.process is not None
            drains[len(groups), protocol] = measure_group_drains(
                target.consume_dsn, "t0", groups, count, 100, target.process.pid, protocol)
            target.kill()
    for protocol, suffix in ((1, ""), (2, " p2")):
        single = drains[1, protocol].rates["g1"]
        rows[f"drain 1{suffix}"].add(single, None if protocol == 1
                                     else single / drains[1, 1].rates["g1"])
        rows[f"drain 1{suffix}"].cpu(drains[1, protocol].node_cpu_us,
                                     drains[1, protocol].consumer_cpu_us)
        for group, rate in drains[3, protocol].rates.items():
            rows[f"drain 3 {group}{suffix}"].add(rate, rate / single)
        together = sum(drains[3, protocol].rates.values())
        rows[f"drain 3 together{suffix}"].add(together, together / single)
        rows[f"drain 3 together{suffix}"].cpu(drains[3, protocol].node_cpu_us,
                                              drains[3, protocol].consumer_cpu_us)


def end_to_end_repeat(nodes: Nodes, count: int, rows: dict[str, Row]) -> None:
    target = nodes.start("e2e-send")
    plain = measure_end_to_end(target.receive_dsn, target.send_dsn, count, 100, 100)
    target.kill()
    rows["e2e send"].add(plain[0], None, plain[1], plain[2])
    for name, credits, ack_arrivals, protocol in E2E_GROUPS:
        target = nodes.start(f"e2e-group-{credits}")
        groups_only(target, ["e2e"])
        grouped = measure_group_end_to_end(target.receive_dsn, target.consume_dsn, count,
                                           100, credits, ack_arrivals, protocol)
        target.kill()
        rows[name].add(grouped[0], grouped[0] / plain[0], grouped[1], grouped[2],
                       grouped[2] / plain[2] if plain[2] else None)


def make_rows() -> dict[str, Row]:
    rows = {
        "produce 1": Row("produce 100 B window 100, 1 topic"),
        "produce 100": Row("produce 100 B window 100, 100 topics", "ratio >= 0.9", 0.9),
    }
    for suffix, name in (("", ""), (" p2", ", protocol 2")):
        rows[f"drain 1{suffix}"] = Row(f"drain, one group alone{name}",
                                       "ratio >= 1 (to protocol 1)" if suffix else "",
                                       1.0 if suffix else None)
        for group in GROUPS:
            rows[f"drain 3 {group}{suffix}"] = Row(
                f"drain, 3 groups at once{name}: {group}", "ratio >= 0.8", 0.8)
        rows[f"drain 3 together{suffix}"] = Row(f"drain, 3 groups at once{name}: all three")
    rows["e2e send"] = Row("end to end window 100, --send-dsn")
    for name, credits, ack_arrivals, protocol in E2E_GROUPS:
        acks = "one ACK per read" if ack_arrivals else "one ACK each"
        batches = ", protocol 2" if protocol > 1 else ""
        rows[name] = Row(f"end to end window 100, a group, {credits} credits, {acks}{batches}",
                         "ratio >= 1, p99 ratio <= 1", 1.0, 1.0)
    return rows


@quiet_on_interrupt
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=positive(int), default=20_000,
                        help="messages per scenario (default: 20000)")
    parser.add_argument("--repeats", type=positive(int), default=3,
                        help="runs of every scenario (default: 3)")
    parser.add_argument("--json", type=output_file, help="write the figures here")
    args = parser.parse_args()
    count = args.count - args.count % 4
    rows = make_rows()
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="pzq-bench-groups-") as folder, \
            contextlib.ExitStack() as stack:
        nodes = Nodes(Path(folder), stack)
        for _ in range(args.repeats):
            produce_repeat(nodes, count, rows)
            drain_repeat(nodes, count, rows)
            end_to_end_repeat(nodes, count, rows)
    print(run_line(started))
    print_rows(list(rows.values()))
    if args.json:
        args.json.write_text(json.dumps([row.summary() for row in rows.values()], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
