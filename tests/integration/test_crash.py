"""SIGKILL in the middle of a windowed stream: every message ACKed "1" is delivered."""

from __future__ import annotations

import pytest

from pzq.client import Consumer, Producer
from tests.support.harness import wait_until

pytestmark = pytest.mark.timeout(120)

SENT_BEFORE_KILL = 4000


@pytest.mark.parametrize("hard_sync", [False, True], ids=["page-cache", "hard-sync"])
def test_sigkill_loses_no_acked_message(start_node, context, hard_sync):
    node = start_node(*(["--hard-sync"] if hard_sync else []))
    acked: set[bytes] = set()
    with Producer(node.receive_dsn, window=500, context=context) as producer:
        for _ in range(SENT_BEFORE_KILL):
            msg_id = producer.next_msg_id()
            producer.send([msg_id, b"." * 100], msg_id=msg_id)
            acked.update(ack.msg_id for ack in producer.acks() if ack.ok)
        # Stopped wherever it is (perhaps mid-batch), the node gets more sends that it
        # will never answer; then it dies.
        node.pause()
        for _ in range(100):
            msg_id = producer.next_msg_id()
            try:
                producer.send([msg_id, b"." * 100], msg_id=msg_id, timeout=0.05)
            except TimeoutError:
                break  # the window is full
        assert producer.outstanding > 0
        node.kill()
        acked.update(ack.msg_id for ack in producer.acks(0.2) if ack.ok)
    assert len(acked) >= SENT_BEFORE_KILL // 2, "the kill came too early to test anything"

    node.restart()
    delivered: dict[bytes, int] = {}
    with Consumer(node.send_dsn, context=context) as consumer:
        def drained() -> bool:
            message = consumer.receive(0.2)
            if message is not None:
                delivered[message.parts[0]] = delivered.get(message.parts[0], 0) + 1
                message.ack()
            return acked <= delivered.keys() and node.figures()["messages"] == 0
        wait_until(drained, 60, interval=0, message="every ACKed message delivered")
    lost = acked - delivered.keys()
    duplicates = sum(count - 1 for count in delivered.values())
    print(f"acked={len(acked)} delivered={len(delivered)} lost={len(lost)} "
          f"duplicates={duplicates}")
    assert not lost
