"""SIGKILL in the middle of a windowed stream: every message ACKed "1" is delivered."""

from __future__ import annotations

import time

import pytest

from pzq.client import Consumer, Producer
from tests.support.harness import unread_bytes, wait_until

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


@pytest.mark.parametrize("batch", [1, None])
def test_messages_a_killed_node_never_answered_are_given_up_and_free_the_window(
        start_node, context, batch):
    """Messages taken by a node that is then killed are never answered (the node
    answers on the connection that brought them): after ``ack_timeout`` s flush
    returns each as an ACK given up and its room in the window is free, so the same
    producer goes on with the restarted node. (Stopped, the node takes them into its
    socket's buffer and reads none: they die with it, whatever the machine's speed.)
    Without the timeout the window stayed full for good: flush never ended."""
    node = start_node()
    with Producer(node.receive_dsn, window=8, batch=batch, ack_timeout=2,
                  context=context) as producer:
        assert producer.produce([b"before"], topic="t-lost").ok
        node.pause()
        lost = [producer.send([b"lost %d" % n], topic="t-lost") for n in range(8)]
        assert producer.outstanding == 8  # the window is full
        port = int(node.receive_dsn.rsplit(":", 1)[1])
        wait_until(lambda: unread_bytes(port) > 0, 10, message="messages in its socket")
        node.kill()
        node.restart()
        started = time.monotonic()
        answers = {ack.msg_id: ack for ack in producer.flush(15)}
        waited = time.monotonic() - started
        assert waited < 10, f"given up after {waited:.1f} s"  # (2 s, and the load)
        # those in the killed node's socket are given up; any the connection had not
        # written yet, and a batch that waited behind them, go to the restarted node
        # (or are given up too, when it is not up within 2 s)
        assert sorted(answers) == sorted(lost), answers
        assert any(ack.given_up for ack in answers.values()), answers
        assert all(ack.ok or (ack.given_up and ack.status_message == b"NO_ACK")
                   for ack in answers.values()), answers
        assert producer.outstanding == 0
        after = [producer.send([b"after %d" % n], topic="t-lost", timeout=5)
                 for n in range(20)]  # more than the window: room came back
        assert [ack.msg_id for ack in producer.flush(10) if ack.ok] == after
        node.pause()  # produce: its message given up is a TimeoutError, said whole
        try:
            with pytest.raises(TimeoutError, match="no ACK within 2 s of sending: the node "
                               "may have stored the message or not .* send it again with "
                               "the same dedup_id"):
                producer.produce([b"paused"], topic="t-lost", timeout=10)
        finally:
            node.resume()
        assert producer.produce([b"resumed"], topic="t-lost", timeout=10).ok
