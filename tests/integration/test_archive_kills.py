"""A node SIGKILLed again and again while a consumer ACKs, with --archive-dir: every
acked message is archived once. The archive is written before the store's delete, so
a kill between the two leaves a message archived and still stored: delivered again
after the restart, its second ACK must not archive it a second time
(pzq.archive.tier.archived_at_start). --hard-sync widens that window to the archive's
fsync before every batch: without the check, 10 kills left 1 330 of 20 000 messages
archived twice (without --hard-sync, 30 kills of 60 000 ACKs left none: the window is
then a few instructions of one wake)."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest
import zmq

from pzq.archive.format.files import read_topic
from pzq.client import Consumer, Producer
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(240)
COUNT = 20_000
KILLS = 10


class Acking(threading.Thread):
    """ACKs every delivery from ``dsn`` as soon as it comes, until told to stop."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.acked = 0
        self.stop = threading.Event()

    def run(self) -> None:
        context = zmq.Context()
        try:
            with Consumer(self.dsn, context=context) as consumer:
                while not self.stop.is_set():
                    message = consumer.receive(0.1)
                    if message is not None:
                        message.ack()
                        self.acked += 1
        finally:
            context.destroy(0)


def test_a_node_killed_while_acks_are_archived_archives_each_message_once(start_node,
                                                                          tmp_path, context):
    archive = tmp_path / "archive"
    node = start_node("--archive-dir", str(archive), "--ack-timeout", "2s", "--hard-sync")
    with Producer(node.receive_dsn, window=5000, context=context) as producer:
        for number in range(COUNT):
            producer.send([b"%06d" % number], topic="kills")
        assert all(ack.ok for ack in producer.flush(60))
    shuffle = random.Random(43)
    found: list[int] = []  # archived and still stored, at each restart
    for _ in range(KILLS):
        consumer = Acking(node.send_dsn)
        consumer.start()
        # killed among the acks: after some hundreds to thousands (some 10 000 a second)
        target = shuffle.randint(300, 1500)
        wait_until(lambda seen=consumer, target=target: seen.acked >= target, 30,
                   interval=0.0005, message="acks going")
        node.kill()
        consumer.stop.set()
        consumer.join(10)
        node.restart()
        event = node.event("archived_and_still_stored")
        found.append(event["messages"] if event else 0)
    consumer = Acking(node.send_dsn)
    consumer.start()
    node.wait_figures(lambda f: f["messages"] == 0, timeout=120, message="every message acked")
    consumer.stop.set()
    consumer.join(10)
    node.stop()
    archived = Counter(m.parts[0] for _, m in read_topic(archive, "kills"))
    assert set(archived) == {b"%06d" % number for number in range(COUNT)}
    twice = sorted(body for body, times in archived.items() if times > 1)
    assert not twice, f"{len(twice)} archived more than once, e.g. {twice[:5]}; found {found}"
    assert sum(found) > 0, "no kill fell between an archive write and its store delete"
    print("found at each restart", found)
