#!/usr/bin/env python3
"""What --authorization costs producers: the benchmark's produce load (pzq.bench.load)
against a node serving CURVE, without the option and with a file whose rules allow
the load's topic (each message's key then read and its rights looked up), runs taken
in turn so that both meet the same machine; the rate, and the node's CPU time per
message, which a busy machine disturbs less; and, timed in this process, the calls
that --authorization adds to each message's intake (see docs/operations.rst,
"Authorization per client key").

    scripts/authorization_cost.py [--count N] [--size BYTES] [--window N] [--runs N]
                                  [--json FILE]
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

from pzq import security
from pzq.authorization import NO_AUTHORIZATION, Authorizing, parse_rules
from pzq.bench.load import produce_load
from pzq.bench.measure import run_workers
from pzq.bench.nodes import NodeProcess
from pzq.bench.options import output_file, positive
from pzq.security import ClientCurve
from pzq.tool_base import quiet_on_interrupt


def keys(folder: Path) -> tuple[list[str], ClientCurve, str]:
    """The node's options, the producer's CURVE and its Z85 public key."""
    node = security.generate(folder / "keys", "node")
    client = security.generate(folder / "keys", "producer")
    admitted = folder / "admitted"
    admitted.mkdir()
    (admitted / "producer.key").write_bytes(client[0].read_bytes())
    pair = security.load_key_pair(client[1])
    curve = ClientCurve(pair, security.load_key_pair(node[1]).public)
    return (["--curve-secret-key", str(node[1]), "--curve-authorized-keys", str(admitted)],
            curve, pair.public.decode())


def curve_produce_load(dsn: str, count: int, size: int, window: int, curve: ClientCurve,
                       results: Any) -> None:
    """The benchmark's producer, with the keys the node admits (a spawned process)."""
    produce_load(dsn, count, size, window, results, curve=curve)


def rate(folder: Path, name: str, options: list[str], curve: ClientCurve, count: int,
         size: int, window: int) -> tuple[float, float]:
    """Messages per second, and the node's CPU µs per message."""
    node = NodeProcess(folder / name, *options).start()
    try:
        before = node.cpu_seconds()
        (answer,) = run_workers([(curve_produce_load, (node.receive_dsn, count, size, window,
                                                       curve))])
        used = node.cpu_seconds() - before
    finally:
        node.stop()
    assert answer["unanswered"] == 0, answer
    return float(answer["count"] / answer["seconds"]), 1e6 * used / answer["count"]


def calls_us(folder: Path, curve: ClientCurve, key: str, node_options: list[str],
             count: int = 200_000) -> dict[str, float]:
    """The calls a message costs the intake, timed in this process on a message that
    came over a CURVE connection (so its first frame has a User-Id): the rights of
    its sender, and whether they allow its topic; without the option
    (NO_AUTHORIZATION) and with it (Authorizing). µs per message."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    server = security.load_node_curve(node_options[1], node_options[3], None, {})
    authenticator = server.start(context)
    try:
        router = context.socket(zmq.ROUTER)
        server.serve(router)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer = context.socket(zmq.DEALER)
        curve.apply(dealer)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart([b"id", b"", b"body"])
        frame = router.recv(copy=False)
        rules = parse_rules({"clients": {key: {"produce": ["default", "orders.*"]}}})
        timed = {}
        for name, authorization in (("without", NO_AUTHORIZATION),
                                    ("with", Authorizing(rules, keyed=True))):
            rights_of = authorization.of
            began = time.perf_counter()
            for _ in range(count):
                rights_of(frame).may_produce("default")
            timed[name] = round(1e6 * (time.perf_counter() - began) / count, 3)
        router.close(0)
        dealer.close(0)
    finally:
        authenticator.stop()
        context.term()
    return timed


@quiet_on_interrupt
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=positive(int), default=200_000)
    parser.add_argument("--size", type=positive(int), default=100)
    parser.add_argument("--window", type=positive(int), default=1000)
    parser.add_argument("--runs", type=positive(int), default=5)
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    given = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        node_options, curve, key = keys(folder)
        rules = folder / "rules.toml"
        rules.write_text(f'[default]\nproduce = []\n\n[clients."{key}"]\n'
                         'produce = ["default", "orders.*"]\n')
        runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
        for number in range(given.runs):
            for case, extra in (("without", []), ("with", ["--authorization", str(rules)])):
                runs[case].append(rate(folder, f"{case}{number}", [*node_options, *extra],
                                       curve, given.count, given.size, given.window))
        calls = calls_us(folder, curve, key, node_options)
    rates = {case: statistics.median(run[0] for run in taken) for case, taken in runs.items()}
    cpu = {case: statistics.median(run[1] for run in taken) for case, taken in runs.items()}
    figures = {
        "messages_per_second": {case: round(value) for case, value in rates.items()},
        "node_cpu_us_per_message": {case: round(value, 2) for case, value in cpu.items()},
        "runs": {case: [(round(rate), round(us, 2)) for rate, us in taken]
                 for case, taken in runs.items()},
        "rate_change_percent": round(100 * (rates["with"] / rates["without"] - 1), 1),
        "cpu_us_per_message_added": round(cpu["with"] - cpu["without"], 2),
        "intake_calls_us_per_message": calls,
    }
    print(json.dumps(figures, indent=2))
    if given.json is not None:
        given.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
