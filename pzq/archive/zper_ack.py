"""ZPAck: after each flush, every message it made durable, published on an XPUB.

Each ack is ``[topic][message id][offset]``: the message id is the first frame the
producer sent (ZPER's advice: make it the message's id), the offset 8 bytes
big-endian, where the record starts in its topic's log (the offset a FETCH of it
takes). SUB sockets subscribe by topic prefix as usual. The socket is an XPUB so
that the node sees subscriptions come and go (see ``ZperAck``) and can count
them; acks are published whether or not anyone listens, and a subscriber past its
high-water mark misses acks, as with any PUB.
"""

from __future__ import annotations

import zmq

from pzq.archive.zper_writer import Written
from pzq.protocol import zper as zp
from pzq.zmqio import Socket, drain, send_frames

SUBSCRIBE, UNSUBSCRIBE = 1, 0


class ZperAck:
    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        # Not verbose: ZeroMQ then passes up a prefix's first subscription and its last
        # unsubscription only (also for a socket that closed), in pairs, so the count is
        # of the prefixes subscribed now; verbose, a prefix one socket subscribed twice
        # is taken back once and the count drifts.
        self.subscriptions = 0
        self.published = 0

    def take_subscriptions(self, limit: int) -> None:
        for frames in drain(self.socket, limit):
            event = frames[0][:1]
            if event == bytes((SUBSCRIBE,)):
                self.subscriptions += 1
            elif event == bytes((UNSUBSCRIBE,)) and self.subscriptions:
                self.subscriptions -= 1

    def publish(self, durable: list[Written]) -> None:
        for written in durable:
            try:
                send_frames(self.socket, zp.encode_ack(written.topic, written.message_id,
                                                      written.offset))
            except zmq.Again:
                return  # nobody can take more now: acks are best effort, as PUB is
            self.published += 1
