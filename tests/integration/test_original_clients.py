"""Clients written the way the original pzq's own PHP client works, against a default node.

Each follows the original client's rules exactly: the producer sends
``[id][empty][parts]`` and checks ``response[0] == id`` and ``response[1] == "1"``
(``response[3]`` is the reason on failure); the consumer takes frame 1 as the key,
2 and 3 as sent time and ack timeout, and the body as every frame from index 5;
the monitor client sends ``MONITOR`` on a REQ socket and splits each line on ": ".
The client itself runs in test_php_client.py when PZQ_PHP_API names its folder.
"""

from __future__ import annotations

import time

import pytest
import zmq

pytestmark = pytest.mark.timeout(60)


def original_produce(socket: zmq.Socket, msg_id: bytes, parts: list[bytes]) -> list[bytes]:
    socket.send_multipart([msg_id, b"", *parts])
    assert socket.poll(10_000), "ACK timeout"
    response = socket.recv_multipart()
    assert response[0] == msg_id, "Got ACK for wrong message"
    return response


def original_consume(socket: zmq.Socket) -> dict:
    assert socket.poll(10_000), "no delivery"
    parts = socket.recv_multipart()
    return {"peer": parts[0], "id": parts[1], "sent": parts[2], "ack_timeout": parts[3],
            "message": parts[5:]}


def original_monitor(socket: zmq.Socket) -> dict[str, str]:
    socket.send(b"MONITOR")
    assert socket.poll(10_000), "no monitor answer"
    data = {}
    for line in filter(None, socket.recv().decode().split("\n")):
        key, value = line.split(": ")[:2]
        data[key] = value
    return data


COUNT = 12  # enough for a run of first deliveries sent in one go (pzq.serving.frame_runs)


def test_original_producer_consumer_and_monitor(node, open_socket):
    producer = open_socket(zmq.DEALER)
    producer.connect(node.receive_dsn)
    for i in range(COUNT):
        response = original_produce(producer, b"php-%d" % i, [b"hello %d" % i, b"part two"])
        assert response[1] == b"1", response

    consumer = open_socket(zmq.ROUTER)
    consumer.connect(node.send_dsn)
    bodies = []
    for _ in range(COUNT):
        message = original_consume(consumer)
        sent_s = int(message["sent"]) / 1e6
        # The original client drops deliveries older than their ack timeout.
        assert time.time() - sent_s < int(message["ack_timeout"]) / 1e6
        bodies.append(message["message"])
        consumer.send_multipart([message["peer"], message["id"], b"1"])
    assert bodies == [[b"hello %d" % i, b"part two"] for i in range(COUNT)]

    monitor = open_socket(zmq.REQ)
    monitor.connect(node.monitor_dsn)
    node.wait_figures(lambda f: f["acked"] == COUNT, message="the ACKs applied")
    figures = original_monitor(monitor)
    assert figures["messages"] == "0" and figures["messages_inflight"] == "0"
    for key in ("db_size", "inflight_db_size", "syncs", "expired_messages"):
        assert figures[key].isdigit(), (key, figures[key])


def test_original_producer_reads_the_refusal_reason_at_index_3(node, open_socket):
    producer = open_socket(zmq.DEALER)
    producer.connect(node.receive_dsn)
    producer.send_multipart([b"no-body", b""])
    assert producer.poll(10_000)
    response = producer.recv_multipart()
    assert response[:2] == [b"no-body", b"0"]
    assert b"no body part" in response[3]
