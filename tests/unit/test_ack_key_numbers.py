"""An ACK of many keys in one frame read into numbers as it came
(``consume.ack_key_numbers``), against the long way: its keys split out
(``ack_keys``) and read (``message_key_numbers``), for well-formed ACKs and for
ones with a bad key, a doubled or trailing space, too few keys or a frame more."""

from __future__ import annotations

import random

import pytest

from pzq.protocol import consume
from pzq.protocol.message_keys import message_key, message_key_numbers

pytestmark = pytest.mark.timeout(60)

AT_LEAST = 4


def long_way(frames: list[bytes]):
    keys = consume.ack_keys(frames)
    if keys is None or len(keys) < AT_LEAST:
        return None
    return message_key_numbers(keys)


def spoiled(rng: random.Random, frame: bytes) -> bytes:
    at = rng.randrange(len(frame) + 1)
    return rng.choice((
        frame[:at] + rng.choice((b" ", b"-", b"g", b"A", b"0", b"")) + frame[at + 1:],
        frame + b" ", b" " + frame, frame.replace(b" ", b"  ", 1), frame[:at],
    ))


def test_one_frame_reads_as_its_keys_split():
    rng = random.Random(41)
    read = 0
    for _ in range(3000):
        count = rng.choice((1, 3, 4, 5, 100, 257))
        node_ids = [b"%08x" % rng.choice((0, 1, 0xDEADBEEF, 0xFFFFFFFF))
                    for _ in range(count)] if rng.random() < 0.3 \
            else [b"0a1b2c3d"] * count
        keys = [message_key(node_id, rng.randrange(1 << 64)) for node_id in node_ids]
        frame = consume.KEY_SEPARATOR.join(keys)
        if rng.random() < 0.4:
            frame = spoiled(rng, frame)
        frames = [consume.ACK, frame]
        if rng.random() < 0.1:
            frames = rng.choice(([consume.NACK, frame], [consume.ACK, frame, keys[0]],
                                 [consume.ACK], [consume.ACK, *keys]))
        found = consume.ack_key_numbers(frames, AT_LEAST)
        expected = long_way(frames)
        if found is not None:
            read += 1
            assert found == expected
        else:  # not read here: one frame of enough good keys never goes the long way
            assert expected is None or len(frames) != 2
    assert read > 1000


def test_many_keys_at_once_are_what_the_keys_name():
    keys = [message_key(b"0a1b2c3d", seq) for seq in range(500, 600)]
    node_ids, seqs = consume.ack_key_numbers([consume.ACK, b" ".join(keys)], AT_LEAST)
    assert node_ids == (0x0A1B2C3D,) * 100 and seqs == tuple(range(500, 600))
    assert consume.ack_key_numbers([consume.ACK, b" ".join(keys[:3])], AT_LEAST) is None


class Uncounted(bytes):
    """A frame whose separators may not be counted (a pass over its bytes)."""

    def count(self, *args: object) -> int:  # type: ignore[override]
        raise AssertionError("the keys' separators were counted")


def test_the_keys_are_told_by_the_frames_length_not_a_count_of_its_separators():
    keys = [message_key(b"0a1b2c3d", seq) for seq in range(7, 107)]
    node_ids, seqs = consume.ack_key_numbers([consume.ACK, Uncounted(b" ".join(keys))],
                                             AT_LEAST)
    assert seqs == tuple(range(7, 107))
    # a frame one byte short or long holds no whole keys: the long way judges it
    assert consume.ack_key_numbers([consume.ACK, Uncounted(b" ".join(keys)[:-1])],
                                   AT_LEAST) is None
    assert consume.ack_key_numbers([consume.ACK, Uncounted(b" ".join(keys) + b" ")],
                                   AT_LEAST) is None


def test_one_nodes_keys_make_one_node_id_and_the_seqs_alone():
    """One node's keys (the common ACK): its node id read once, not once a key."""
    keys = [message_key(b"0a1b2c3d", seq) for seq in range(100)]
    node_ids, seqs = consume.ack_key_numbers([consume.ACK, b" ".join(keys)], AT_LEAST)
    assert node_ids == (0x0A1B2C3D,) * 100 and seqs == tuple(range(100))
    assert all(node_id is node_ids[0] for node_id in node_ids)
    mixed = keys[:50] + [message_key(b"0a1b2c3e", 50)] + keys[51:]
    node_ids, seqs = consume.ack_key_numbers([consume.ACK, b" ".join(mixed)], AT_LEAST)
    assert node_ids == (0x0A1B2C3D,) * 50 + (0x0A1B2C3E,) + (0x0A1B2C3D,) * 49
    assert seqs == tuple(range(100))
