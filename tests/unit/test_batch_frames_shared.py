"""A topic's groups send the same piece of the same run's entries (pzq.serving.batching):
its frame is joined once and sent to each; any other batch is joined as it is."""

from __future__ import annotations

import sys

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


def test_a_batch_of_one_piece_copies_nothing_out_of_the_run_and_another_entry_joins_it():
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("inproc://piece-not-copied")
    peer = context.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.setsockopt(zmq.IDENTITY, b"c1")
    peer.connect("inproc://piece-not-copied")
    try:
        consumer = ServedConsumer(b"c1", None, 100, 0.0,  # type: ignore[arg-type]
                                  head=[b"c1", wire.BATCH, b"t", b"g"])
        run = [b"entry %d;" % at for at in range(10)]
        references = sys.getrefcount(run[3])
        batch = OpenBatch(router)
        assert batch.add_run(consumer, run, 2, 8, 1, 2) == 8
        # the piece is the run's list's still: no list of its entries made (one before)
        after = sys.getrefcount(run[3])
        assert after == references
        batch.close()
        # the fallback: a piece, then an entry added alone, then another piece
        batch.add_run(consumer, run, 0, 3, 1, 2)
        batch.add(consumer, b"k", b"\x00" * 40, 1, 1, 2, False)
        alone = batch.entries[-1]
        batch.add_run(consumer, run, 5, 7, 1, 2)
        batch.close()
        for entries in (run[2:8], [*run[0:3], alone, *run[5:7]]):
            assert peer.poll(5000)
            got = peer.recv_multipart()
            assert got[:3] == [wire.BATCH, b"t", b"g"]
            assert got[5] == b"".join(entries)
        assert not peer.poll(0)
    finally:
        peer.close()
        router.close()
        context.term()
