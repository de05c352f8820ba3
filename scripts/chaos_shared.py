"""What the soaks of consumer groups share (scripts/chaos_groups.py,
scripts/chaos_time.py): a topic and its groups declared on every node, a node kill
that in a cluster may wait until a peer took the node's messages over, the stores
left at the end, the ``--groups`` option and the consumers' threads. The nodes, the
faults' schedule and the plain producers are scripts/chaos.py's. A soak's report (a
dataclass with ``failed()``) is printed, and its exit code given, by
``report_and_exit``."""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, Protocol, TypeVar

import zmq
from chaos import Nodes, Unavailable, add_store_modes

from pzq.bench.nodes import wait_until
from pzq.client import ConsumeRefused, GroupConsumer, request_monitor
from pzq.clock import Now
from pzq.errors import ExitCode

GROUP_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")
DOWN_SECONDS = (0.0, 2.0)  # how much longer a node stays down after its takeover
TAKEOVER_TIMEOUT_S = 30.0
# what STATS must say 0 of on every node once everything is ACKed or expired
MESSAGES_AND_COPIES = {"messages": "messages", "copies": "replicas_held"}


def declare_groups(nodes: Nodes, topic: str, groups: Sequence[str], topic_settings: str = "",
                   group_settings: str = "") -> list[bytes]:
    """The topic (with ``topic_settings``, e.g. ``priorities=on``) and its groups (with
    ``group_settings``) on every node, without ``default``; the node ids."""
    commands = [f"DECLARE TOPIC {topic} {topic_settings}".rstrip(),
                *(f"DECLARE GROUP {topic} {g} {group_settings}".rstrip() for g in groups),
                f"REMOVE GROUP {topic} default"]
    ids = []
    for node in nodes.members:
        for command in commands:
            answer = request_monitor(node.monitor_dsn, command, 10.0)
            if answer.startswith(b"ERROR"):
                raise RuntimeError(f"{command}: {answer.decode(errors='replace')}")
        ids.append(node.stats()["node_id"].encode())
    return ids


def taken_over(origin: str, survivors: list[dict[str, Any] | None]) -> str | None:
    """'taken over' once a survivor delivers ``origin``'s copies, 'no copies' when none
    holds any; None while neither is known."""
    if any(stats is not None and origin in stats["takeovers"] for stats in survivors):
        return "taken over"
    if None in survivors:
        return None
    held = sum(peer["replicas_held"] for stats in survivors if stats is not None
               for peer in stats["peers"] if peer["node_id"] == origin)
    return None if held else "no copies"


def await_takeover(nodes: Nodes, node_ids: Sequence[bytes], index: int) -> bool:
    """Until a peer took node ``index``'s messages over (True), or no peer holds a copy
    of them (False: there is nothing to take over)."""
    cluster = nodes.cluster
    assert cluster is not None
    origin = node_ids[index].decode()
    taken = wait_until(lambda: taken_over(origin, [cluster.stats(other) for other
                                                   in cluster.others(index)]),
                       TAKEOVER_TIMEOUT_S, interval=0.1, message=f"a takeover of node {index}")
    return taken == "taken over"


def kill_and_restart(nodes: Nodes, node_ids: Sequence[bytes], index: int, rng: random.Random,
                     killed: Callable[[Now], None], back: Callable[[Now], None],
                     taken: Callable[[bool], None]) -> None:
    """SIGKILL node ``index`` and start it again; in a cluster, half the time only once
    a peer took its messages over (or none holds a copy) and 0 to 2 s more. Told, in
    this order: ``killed`` once the node is dead, with the moment the SIGKILL was sent
    (it runs no more code from then on); ``taken`` whether a takeover was awaited and
    came (when one was awaited); ``back`` once the node runs again, with that moment."""
    member = nodes.members[index]
    signalled = Now.read()
    member.kill()
    killed(signalled)
    if nodes.cluster is not None and rng.random() < 0.5:
        taken(await_takeover(nodes, node_ids, index))
        time.sleep(rng.uniform(*DOWN_SECONDS))  # the outage's length, not a wait
    member.restart()
    back(Now.read())


def store_left(nodes: Nodes, fields: dict[str, str] | None = None) -> dict[str, int]:
    """What is still stored, per node and STATS field (``fields``: the report's name ->
    the STATS name; messages and copies by default); -1: the node did not answer."""
    fields = fields or MESSAGES_AND_COPIES
    left = {}
    for index, node in enumerate(nodes.members):
        try:
            stats: dict[str, Any] = node.stats()
        except (OSError, TimeoutError, RuntimeError):
            stats = {}
        for name, stat in fields.items():
            left[f"node{index} {name}"] = int(stats.get(stat, -1))
    return left


def group_names(text: str) -> list[str]:
    """``--groups``: names separated by commas, none ``default``, none twice."""
    names = text.split(",")
    for name in names:
        if not GROUP_NAME.fullmatch(name) or name == "default":
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a group name (1-255 of A-Z a-z 0-9 . _ -, not 'default')")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a group is named twice in {text!r}")
    return names


class SoakReport(Protocol):
    def failed(self) -> bool: ...


Report = TypeVar("Report", bound=SoakReport)


def report_and_exit(parser: argparse.ArgumentParser, run: Callable[[], Report],
                    print_table: Callable[[Report], None], as_json: bool) -> int:
    """The soak run, its report printed (a table, or JSON), and the exit code: FAILURE
    when a check failed; a cluster it cannot make is a usage error of one line."""
    try:
        report = run()
    except Unavailable as exc:
        parser.exit(ExitCode.USAGE, f"{parser.prog}: error: {exc}\n")
    if as_json:
        print(json.dumps(asdict(report)))  # type: ignore[call-overload]
    else:
        print_table(report)
    return ExitCode.FAILURE if report.failed() else ExitCode.OK


def soak_parser(prog: str, description: str, seconds: float, rate: float,
                kills: int) -> argparse.ArgumentParser:
    """The options the group soaks share (each adds its own), with its defaults."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    parser.add_argument("--replicas", type=int, choices=(1, 2), default=1,
                        help="copies of each message (--nodes 3)")
    parser.add_argument("--groups", type=group_names, default=["billing", "audit"],
                        help="the topic's groups, comma separated")
    parser.add_argument("--seconds", type=float, default=seconds, help="how long to produce")
    parser.add_argument("--rate", type=float, default=rate, help="messages a second")
    parser.add_argument("--kills", type=int, default=kills, help="node SIGKILLs and restarts")
    add_store_modes(parser)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


class SoakConsumer(threading.Thread):
    """One consumer of one group on one node, made again (``_one_consumer``) each time
    the one before ended, until ``stopping``; what it raised is the main thread's to
    report (``error``)."""

    def __init__(self, number: int, group: str, node: int, dsn: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.number, self.group, self.node, self.dsn = number, group, node, dsn
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self._one_consumer()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _one_consumer(self) -> None:
        raise NotImplementedError

    def joined(self, topic: str, window: int) -> tuple[GroupConsumer, zmq.Context[Any]] | None:
        """A consumer joined to the group, with its context; None while the node is
        down or starting (tried again by the next ``_one_consumer``)."""
        context: zmq.Context[Any] = zmq.Context()
        try:
            return GroupConsumer(self.dsn, topic, self.group, window=window,
                                 context=context, timeout=1.0), context
        except (TimeoutError, ConsumeRefused):
            context.destroy(linger=0)
            return None
