"""Power-loss rounds: a node under load (a producer, a consumer, the archive on) on a
PowerFS disk, killed at a random moment while its disk loses what was not fsync'd;
then started again on what is left and drained.

A message the producer got ACK "1" for is lost when, after the restart, it is
neither delivered nor in the archive (a consumer that acked it before the cut had
it archived first). Its age is the time from its ACK to the cut. Used by
tests/integration/test_power_loss.py and scripts/power_loss.py.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from pzq.archive.format.files import read_topic
from pzq.bench.nodes import NodeProcess, wait_until
from pzq.client import Consumer, Producer
from pzq.zmqio import Context
from tests.support.power_cut import PowerCut

WINDOW = 100
# The consumer takes at most one message in this many sent: a backlog builds up,
# whose older messages a loss without a bound in time would take too.
CONSUME_EVERY = 2
SIZES = (200, 4096)  # message bodies from/to, bytes
# Bodies large enough to fill LevelDB's 32 MiB write buffer within a round, so
# the cut can fall while a new log takes writes and the old one is not compacted.
LARGE = (16_384, 65_536)
DRAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Round:
    acked: int  # messages the producer got ACK "1" for
    lost: int  # of those, neither delivered after the restart nor archived
    oldest_lost_age_s: float  # the lost message ACKed longest before the cut (0: none)
    delivered_after: int  # messages delivered after the restart (again or for the first time)

    def __str__(self) -> str:
        """A round as a line of the power-loss run, each number with its unit."""
        oldest = (f"the oldest ACKed {self.oldest_lost_age_s:.3f} s before the cut"
                  if self.lost else "none")
        return (f"{self.acked:,} messages ACKed, {self.lost:,} lost ({oldest}), "
                f"{self.delivered_after:,} delivered after the restart")


def node_args(archive: Path, hard_sync: bool, sync_interval: str) -> list[str]:
    mode = ["--hard-sync"] if hard_sync else ["--sync-interval", sync_interval]
    return [*mode, "--archive-dir", str(archive), "--ack-timeout", "30s"]


def run_round(node: NodeProcess, power: PowerCut, archive: Path, load_s: float,
              rng: random.Random, context: Context,
              sizes: tuple[int, int] = SIZES) -> Round:
    """One round on a running node: load, kill and cut, restart, drain. The node
    runs again at the end."""
    acked_at, cut_at = _load_until_cut(node, power, load_s, rng, context, sizes)
    power.start()
    node.restart()
    delivered = _drain(node, context)
    archived = {message.msg_id for topic in _topics(archive)
                for _, message in read_topic(archive, topic)}
    lost = set(acked_at) - delivered - archived
    oldest = max((cut_at - acked_at[msg_id] for msg_id in lost), default=0.0)
    return Round(len(acked_at), len(lost), round(oldest, 3), len(delivered))


def _load_until_cut(node: NodeProcess, power: PowerCut, load_s: float, rng: random.Random,
                    context: Context, sizes: tuple[int, int]) -> tuple[dict[bytes, float], float]:
    """Produce and consume for ``load_s``; then SIGKILL and the power cut. Returns
    when each ACKed message's ACK was read (the ones read after the kill: the
    cut), and when the cut was."""
    acked_at: dict[bytes, float] = {}
    with Producer(node.receive_dsn, window=WINDOW, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        stop = time.monotonic() + load_s
        sent = 0
        while time.monotonic() < stop:
            msg_id = producer.next_msg_id()
            producer.send([msg_id, rng.randbytes(rng.randint(*sizes))], msg_id=msg_id)
            sent += 1
            now = time.monotonic()
            acked_at.update((ack.msg_id, now) for ack in producer.acks() if ack.ok)
            message = consumer.receive(0) if sent % CONSUME_EVERY == 0 else None
            if message is not None:
                message.ack()
        node.kill()
        cut_at = time.monotonic()
        power.cut()
        acked_at.update((ack.msg_id, cut_at) for ack in producer.acks(0.2) if ack.ok)
    return acked_at, cut_at


def _drain(node: NodeProcess, context: Context) -> set[bytes]:
    """Every message the restarted node holds, consumed and acked."""
    delivered: set[bytes] = set()
    with Consumer(node.send_dsn, context=context) as consumer:
        def empty() -> bool:
            message = consumer.receive(0.2)
            if message is not None:
                delivered.add(message.parts[0])
                message.ack()
                return False
            return node.stats()["messages"] == 0
        try:
            wait_until(empty, DRAIN_TIMEOUT_S, interval=0, message="the restarted node drained")
        except TimeoutError:
            stats = node.stats()
            figures = {key: stats[key] for key in ("messages", "messages_inflight",
                                                   "messages_ready", "delivered", "acked")}
            raise AssertionError(f"the restarted node did not drain in {DRAIN_TIMEOUT_S} s "
                                 f"({len(delivered)} delivered): {figures}") from None
    return delivered


def _topics(archive: Path) -> list[str]:
    return sorted(path.name for path in archive.iterdir() if path.is_dir()) \
        if archive.exists() else []
