"""A topic's groups send the same piece of the same run's entries (pzq.serving.batching):
its frame is joined once and sent to each; any other batch is joined as it is."""

from __future__ import annotations

import zmq

from pzq.protocol import consume as wire
from pzq.serving.batching import OpenBatch
from pzq.serving.holding import ServedConsumer

NAMES = (b"c1", b"c2", b"c3")


def test_the_same_piece_is_joined_once_and_every_batch_is_whole():
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("inproc://shared-frames")
    peers = []
    for name in NAMES:
        peer = context.socket(zmq.DEALER)
        peer.setsockopt(zmq.LINGER, 0)
        peer.setsockopt(zmq.IDENTITY, name)
        peer.connect("inproc://shared-frames")
        peers.append(peer)
    try:
        consumers = [ServedConsumer(name, None, 100, 0.0,  # type: ignore[arg-type]
                                    head=[name, wire.BATCH, b"t", b"g"]) for name in NAMES]
        run = [b"entry %d;" % at for at in range(10)]
        batch = OpenBatch(router)
        frames = []
        for consumer in consumers:  # each group's consumer: the same piece
            assert batch.add_run(consumer, run, 2, 8, 1, 2) == 8
            batch.close()
            frames.append(batch._joined[0][3])
        assert frames[0] is frames[1] is frames[2] == b"".join(run[2:8])
        batch.add_run(consumers[0], run, 0, 8, 1, 2)  # another piece: joined anew
        batch.close()
        batch.add_run(consumers[1], run, 2, 5, 1, 2)  # two pieces in one batch: as they are
        batch.add_run(consumers[1], run, 7, 10, 1, 2)
        batch.close()
        batch.add_run(consumers[2], run, 2, 8, 1, 2)  # the first piece again: kept still
        batch.close()
        assert batch._joined[-1][3] is frames[0]
        expected = {b"c1": [run[2:8], run[0:8]], b"c2": [run[2:8], run[2:5] + run[7:10]],
                    b"c3": [run[2:8], run[2:8]]}
        for name, peer in zip(NAMES, peers, strict=True):
            for entries in expected[name]:
                assert peer.poll(5000)
                got = peer.recv_multipart()
                assert got[:3] == [wire.BATCH, b"t", b"g"] and got[3:5] == [b"1", b"2"]
                assert got[5] == b"".join(entries)
            assert not peer.poll(0)
    finally:
        for peer in peers:
            peer.close()
        router.close()
        context.term()
